"""Streaming readers and atomic writers for dataset files (JSONL, JSON, Parquet, CSV).

Writes go to a temp file in the destination's directory and are renamed over the destination only when the whole
file was written: a crash, an exception or a rejected upload never leaves a half-written dataset. Several outputs
that belong together (kept rows + quarantined rows) are renamed together at the end.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO

from training_platform.core.files import atomic_outputs, json_default
from training_platform.data.formats import (
    SUPPORTED_SUFFIXES,
    DatasetError,
    LimitExceeded,
    ReadLimits,
    RowError,
    bounded_lines,
    check_file_size,
)

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

WRITE_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")


# ---------------------------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class Record:
    """One row of a file: `index` is 0-based over the rows, `line` the 1-based line (JSONL) or record number
    (JSON/Parquet/CSV) used in error messages. `row` is None when the line was not valid JSON (`error` says why)."""

    index: int
    line: int
    row: Any
    error: RowError | None = None
    raw: str | None = None  # the line's text when it was not valid JSON


def iter_records(path: str | Path, limits: ReadLimits | None = None) -> Iterator[Record]:
    """Stream the rows of a file without stopping at unparseable JSONL lines (they come back with `error` set).
    Blank JSONL lines are skipped and do not count as rows. Parquet is read batch by batch. Every read is bounded
    (`limits`, see ReadLimits: a line longer than the row cap is never held whole); a file over a limit raises
    LimitExceeded (a DatasetError)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (*SUPPORTED_SUFFIXES, ".ndjson"):
        raise DatasetError(
            [RowError(0, "<file>", f"unsupported file type {suffix!r}; use one of {', '.join(SUPPORTED_SUFFIXES)}")]
        )
    if not path.is_file():
        raise DatasetError([RowError(0, "<file>", f"no such file: {path}")])
    limits = limits or ReadLimits()
    max_rows = limits.max_rows
    index = 0
    if suffix in (".jsonl", ".ndjson"):
        check_file_size(path, limits)
        with path.open("rb") as f:
            for line_no, raw in bounded_lines(f, limits.max_row_bytes):
                line = raw.decode("utf-8")
                if not line.strip():
                    continue
                if max_rows is not None and index >= max_rows:
                    raise _too_many_rows(line_no, max_rows)
                try:
                    yield Record(index, line_no, json.loads(line))
                except json.JSONDecodeError as exc:
                    yield Record(
                        index,
                        line_no,
                        None,
                        RowError(line_no, "<row>", f"invalid JSON: {exc.msg}"),
                        raw=line.rstrip("\n"),
                    )
                index += 1
        return
    from training_platform.data.formats import read_rows

    for line, row in read_rows(path, limits):
        if max_rows is not None and index >= max_rows:
            raise _too_many_rows(line, max_rows)
        yield Record(index, line, row)
        index += 1


def _too_many_rows(line: int, max_rows: int) -> LimitExceeded:
    return LimitExceeded("rows", line, f"the file has more than the limit of {max_rows} rows per dataset file")


def iter_rows(path: str | Path) -> Iterator[Any]:
    """Just the rows (raises DatasetError on the first unparseable line)."""
    for record in iter_records(path):
        if record.error is not None:
            raise DatasetError([record.error])
        yield record.row


def count_rows(path: str | Path) -> int:
    return sum(1 for _ in iter_records(path))


@contextmanager
def atomic_output(path: str | Path) -> Iterator[Path]:
    """`atomic_outputs` for a single destination: yields its temp path, renamed over `path` on success, deleted on
    any exception."""
    with atomic_outputs(path) as (temp,):
        assert temp is not None  # atomic_outputs gives a temp path for every destination that is not None
        yield temp


class RowWriter:
    """Write rows to a file whose type follows its suffix. Use as a context manager: the destination appears
    (atomically) only if the block finishes without an exception.

    Parquet rows are buffered `parquet_batch_rows` at a time; the schema is inferred from the first batch, later
    batches must fit it."""

    def __init__(self, path: str | Path, *, parquet_batch_rows: int = 20_000):
        self.path = Path(path)
        self.suffix = self.path.suffix.lower()
        if self.suffix not in WRITE_SUFFIXES:
            raise DatasetError(
                [
                    RowError(
                        0,
                        "<output>",
                        f"unsupported output type {self.suffix!r}; use one of {', '.join(WRITE_SUFFIXES)}",
                    )
                ]
            )
        self.rows = 0
        self._batch_rows = parquet_batch_rows
        self._ctx: AbstractContextManager[Path] | None = None
        self._temp: Path | None = None
        self._file: TextIO | None = None
        self._buffer: list[dict] = []
        self._pq_writer: pq.ParquetWriter | None = None
        self._schema: pa.Schema | None = None
        self._csv: csv.DictWriter | None = None

    def __enter__(self) -> RowWriter:
        self._ctx = atomic_output(self.path)
        self._temp = self._ctx.__enter__()
        if self.suffix in (".jsonl", ".json", ".csv"):
            self._file = self._temp.open("w", encoding="utf-8", newline="" if self.suffix == ".csv" else None)
            if self.suffix == ".json":
                self._file.write("[")
        return self

    @property
    def _text(self) -> TextIO:
        """The open text file of a JSONL, JSON or CSV output (opened by __enter__)."""
        assert self._file is not None, "RowWriter is written to outside its with block"
        return self._file

    def write(self, row: Any) -> None:
        if self.suffix == ".jsonl":
            self._text.write(json.dumps(row, ensure_ascii=False, default=json_default) + "\n")
        elif self.suffix == ".json":
            self._text.write(
                ("\n" if self.rows == 0 else ",\n") + json.dumps(row, ensure_ascii=False, default=json_default)
            )
        elif self.suffix == ".csv":
            if not isinstance(row, dict):
                raise DatasetError([RowError(self.rows + 1, "<row>", "CSV rows must be objects")])
            if self._csv is None:
                self._csv = csv.DictWriter(self._text, fieldnames=list(row), extrasaction="raise")
                self._csv.writeheader()
            try:
                self._csv.writerow(
                    {
                        k: v
                        if isinstance(v, str | int | float | bool) or v is None
                        else json.dumps(v, ensure_ascii=False)
                        for k, v in row.items()
                    }
                )
            except ValueError as exc:
                raise DatasetError([RowError(self.rows + 1, "<row>", f"cannot be written as CSV: {exc}")]) from None
        else:
            self._buffer.append(row)
            self.rows += 1
            if len(self._buffer) >= self._batch_rows:
                self._flush_parquet()
            return
        self.rows += 1

    def write_all(self, rows: Iterable[Any]) -> int:
        for row in rows:
            self.write(row)
        return self.rows

    def _flush_parquet(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not self._buffer:
            return
        first = self.rows - len(self._buffer) + 1
        try:
            table = pa.Table.from_pylist(self._buffer, schema=self._schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise DatasetError(
                [
                    RowError(
                        first,
                        "<row>",
                        f"rows {first}..{self.rows} do not fit the Parquet schema inferred from the first rows: {exc}",
                    )
                ]
            ) from None
        if self._pq_writer is None:
            self._schema = table.schema
            self._pq_writer = pq.ParquetWriter(self._temp, self._schema)
        self._pq_writer.write_table(table)
        self._buffer = []

    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        error = exc
        try:
            if error is None:
                if self.suffix == ".parquet":
                    self._flush_parquet()
                    if self._pq_writer is None:  # no rows at all: an empty table
                        import pyarrow as pa
                        import pyarrow.parquet as pq

                        pq.write_table(pa.table({}), self._temp)
                elif self.suffix == ".json":
                    self._text.write("\n]\n" if self.rows else "]\n")
        except BaseException as finish_error:  # noqa: BLE001 - kept, re-raised after the files are closed
            error = finish_error
        finally:
            for closer in (self._file, self._pq_writer):
                if closer is not None:
                    try:
                        closer.close()
                    except BaseException as close_error:  # noqa: BLE001 - the first error is re-raised
                        error = error or close_error
        assert self._ctx is not None  # set by __enter__
        if error is None:
            self._ctx.__exit__(None, None, None)  # renames the temp file over the destination
            return False
        self._ctx.__exit__(type(error), error, error.__traceback__)  # deletes the temp file
        if error is not exc:
            raise error
        return False


def write_rows(path: str | Path, rows: Iterable[Any]) -> int:
    """Write all rows atomically; returns how many."""
    with RowWriter(path) as writer:
        return writer.write_all(rows)


def read_json_or_yaml(path: str | Path) -> Any:
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() in (".yaml", ".yml"):
        import yaml

        return yaml.safe_load(text)
    return json.loads(text)

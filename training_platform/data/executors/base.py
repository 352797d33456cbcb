"""Where the data factory's row work runs: the executor registry, and the blocks a file is read in.

An operation is written once, as *stages*: a block stage turns a block of records (consecutive rows of the input,
with their 0-based index and line) into a picklable result; the operation merges the results in file order. An
executor decides where the stages run:

- `local` (executors/local.py): in this process, reading the file once, block after block;
- `ray` (executors/ray.py): as Ray Data map stages on a Ray cluster, over row ranges of the file read by a Ray
  Data datasource, with results handed back in file order; dedup's grouping runs as Ray Data shuffles.

Both see the same blocks' rows in the same order, so an operation's output and report are the same under either
(tests compare them). Adding an executor: a module here with an `Executor` subclass decorated with
`@register_executor("<name>")`, and its import in `__init__.py`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from training_platform.data.formats import DatasetError, ReadLimits, RowError, bounded_lines, check_file_size
from training_platform.data.io import Record, iter_records

if TYPE_CHECKING:
    from training_platform.data.dedup import DedupConfig, DedupResult

DEFAULT_BLOCK_ROWS = 5_000  # rows per block: what one stage call holds in memory
BLOCK_MAX_BYTES = 64 * 2**20  # ... and at most this much of a JSONL file

BlockStage = Callable[[Sequence[Record]], Any]  # picklable (a module-level function or a dataclass instance)


class ExecutorError(ValueError):
    """The executor cannot run (unknown name, unreachable cluster): the message names `executor`."""


@dataclass(frozen=True)
class RowRange:
    """A run of consecutive rows of a file that one task reads: JSONL bytes [start, end), or Parquet row group
    `start`, or the whole file (JSON arrays, CSV: not splittable). `first_index` is its first row's 0-based index,
    `lines_before` the number of lines (JSONL) or records before it, so records keep the file's numbering."""

    number: int
    first_index: int
    lines_before: int
    rows: int
    start: int = 0
    end: int = 0


def plan_ranges(
    path: str | Path, *, block_rows: int = DEFAULT_BLOCK_ROWS, limits: ReadLimits | None = None
) -> list[RowRange]:
    """Split a file into ranges of at most `block_rows` rows (JSONL: and `BLOCK_MAX_BYTES`), in file order. A JSONL
    file is scanned once here (line lengths are checked against the row cap, as the reader does), without parsing."""
    path = Path(path)
    limits = limits or ReadLimits()
    suffix = path.suffix.lower()
    if not path.is_file():
        raise DatasetError([RowError(0, "<file>", f"no such file: {path}")])
    if suffix in (".jsonl", ".ndjson"):
        check_file_size(path, limits)
        ranges: list[RowRange] = []
        start = pos = 0
        rows = index = first_lines = 0
        with path.open("rb") as f:
            for line_no, raw in bounded_lines(f, limits.max_row_bytes):
                if rows and (rows >= block_rows or pos - start >= BLOCK_MAX_BYTES):
                    ranges.append(RowRange(len(ranges), index - rows, first_lines, rows, start, pos))
                    start, rows, first_lines = pos, 0, line_no - 1
                pos += len(raw)
                if raw.strip() if raw.isascii() else raw.decode("utf-8", "replace").strip():
                    rows += 1
                    index += 1
        if rows or not ranges:
            ranges.append(RowRange(len(ranges), index - rows, first_lines, rows, start, pos))
        return ranges
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        meta = pq.ParquetFile(path).metadata
        out, index = [], 0
        for group in range(meta.num_row_groups):
            n = meta.row_group(group).num_rows
            out.append(RowRange(group, index, index, n, group, group + 1))
            index += n
        return out or [RowRange(0, 0, 0, 0, 0, 0)]
    return [RowRange(0, 0, 0, -1)]  # JSON array / CSV: one range, read by one task; rows unknown until read


def read_range(path: str | Path, rng: RowRange, limits: ReadLimits | None = None) -> Iterator[Record]:
    """The records of one range, numbered as `iter_records` numbers them over the whole file."""
    path = Path(path)
    limits = limits or ReadLimits()
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        index = rng.first_index
        with path.open("rb") as f:
            f.seek(rng.start)
            remaining = rng.end - rng.start
            for offset, raw in bounded_lines(f, limits.max_row_bytes):
                if remaining <= 0:
                    return
                remaining -= len(raw)
                line_no = rng.lines_before + offset
                line = raw.decode("utf-8")
                if not line.strip():
                    continue
                try:
                    yield Record(index, line_no, json.loads(line))
                except json.JSONDecodeError as exc:
                    error = RowError(line_no, "<row>", f"invalid JSON: {exc.msg}")
                    yield Record(index, line_no, None, error, raw=line.rstrip("\n"))
                index += 1
        return
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        if rng.end == rng.start:
            return
        index = rng.first_index
        for batch in pq.ParquetFile(path).iter_batches(batch_size=1024, row_groups=[rng.start]):
            for row in batch.to_pylist():
                yield Record(index, index + 1, row)
                index += 1
        return
    yield from iter_records(path, limits)


def blocks(records: Iterator[Record], block_rows: int) -> Iterator[list[Record]]:
    block: list[Record] = []
    for record in records:
        block.append(record)
        if len(block) >= block_rows:
            yield block
            block = []
    if block:
        yield block


class Executor:
    """Runs an operation's stages. `map_blocks` yields `stage(block)` for every block of the file, in file order."""

    name: ClassVar[str]
    workers: int = 1
    block_rows: int = DEFAULT_BLOCK_ROWS  # rows per block (the results do not depend on it)
    # on_progress({"stage", "done", "total", "workers": {worker: blocks done}}) as blocks complete (ray)
    on_progress: Callable[[dict[str, Any]], None] | None = None

    def map_blocks(self, path: Path, stage: BlockStage) -> Iterator[Any]:
        raise NotImplementedError

    def duplicates(
        self, path: Path, config: DedupConfig, *, fmt: str | None, fields: list[str] | None, workdir: Path | None
    ) -> tuple[DedupResult, dict[str, Any]]:
        """Dedup's clusters over the file's rows (see data/dedup.py), and what the scan learned: the format, and
        the schema tracker plus each row's shape (for the output version's schema)."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """What the report records about where the operation ran."""
        return {"name": self.name, "workers": self.workers}


EXECUTORS: dict[str, type[Executor]] = {}

ExT = TypeVar("ExT", bound=type[Executor])


def register_executor(name: str) -> Callable[[ExT], ExT]:
    def decorate(cls: ExT) -> ExT:
        if name in EXECUTORS:
            raise ValueError(f"executor {name!r} is registered twice")
        cls.name = name
        EXECUTORS[name] = cls
        return cls

    return decorate


def get_executor(name: str, **options: Any) -> Executor:
    """An executor by name (`local`, `ray`), built with its options (ray: address, workers)."""
    try:
        cls = EXECUTORS[name]
    except KeyError:
        raise ExecutorError(f"executor: unknown executor {name!r}; use one of {', '.join(EXECUTORS)}") from None
    return cls(**options)

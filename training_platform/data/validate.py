"""Validate a dataset file row by row, and ingest it under a bad-row policy.

- `validate_file`: detect (or take) the format, check every row, report each bad row with its line, field and
  reason. Nothing is written.
- `ingest_file`: the same check, then store the rows. Policy `reject`: any bad row refuses the whole file and
  nothing is stored. Policy `quarantine`: good rows go to the destination, bad rows (with their line and errors)
  to their own file, and the report lists them. Both outputs appear atomically, together.

The format is settled by the driver (the first parseable row's, unless given); the rows are checked block by block
by `ValidateStage` on an executor (data/executors/: local, or Ray Data stages), merged in file order here, where the
outputs are written.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from training_platform.data.formats import (
    DATA_FORMATS,
    DatasetError,
    ReadLimits,
    RowError,
    apply_field_map,
    detect_format,
    validate_row,
)
from training_platform.data.io import Record, RowWriter, atomic_output, iter_records

if TYPE_CHECKING:
    from training_platform.data.executors import Executor

Policy = Literal["reject", "quarantine"]


@dataclass
class BadRow:
    index: int  # 0-based row index
    line: int  # 1-based line (JSONL) or record number
    errors: list[RowError]

    @property
    def first(self) -> RowError:
        return self.errors[0]


@dataclass
class ValidationReport:
    path: str
    format: str | None
    rows: int = 0
    valid_rows: int = 0
    bad_rows: list[BadRow] = field(default_factory=list)
    file_errors: list[RowError] = field(default_factory=list)  # problems that are not about one row
    policy: str | None = None
    accepted: bool | None = None
    output: str | None = None
    quarantine: str | None = None
    executor: dict[str, Any] | None = None  # where the rows were checked (Executor.describe())

    @property
    def ok(self) -> bool:
        return not self.bad_rows and not self.file_errors

    def lines(self) -> list[str]:
        """One `line N: field: reason` per bad row (its first problem), file-level problems first."""
        return [str(e) for e in self.file_errors] + [str(b.first) for b in self.bad_rows]

    def to_dict(self, max_rows: int | None = 1000) -> dict[str, Any]:
        bad = self.bad_rows if max_rows is None else self.bad_rows[:max_rows]
        return {
            "path": self.path,
            "format": self.format,
            "rows": self.rows,
            "valid_rows": self.valid_rows,
            "bad_row_count": len(self.bad_rows),
            "bad_rows": [{"index": b.index, "line": b.line, "errors": [asdict(e) for e in b.errors]} for b in bad],
            "file_errors": [asdict(e) for e in self.file_errors],
            "policy": self.policy,
            "accepted": self.accepted,
            "output": self.output,
            "quarantine": self.quarantine,
            "executor": self.executor,
        }


def _check_format(fmt: str) -> None:
    if fmt != "auto" and fmt not in DATA_FORMATS:
        raise ValueError(f"--format: unknown format {fmt!r}; use auto or one of {', '.join(DATA_FORMATS)}")


def detect_file_format(path: str | Path, field_map: dict[str, str] | None = None) -> str:
    """The format of the first parseable row; DatasetError if the file has no rows or the format is unknown."""
    for record in iter_records(path):
        if record.error is not None or not isinstance(record.row, dict):
            continue
        row = apply_field_map(record.row, field_map or {})
        fmt = detect_format(row)
        if fmt is None:
            raise DatasetError(
                [
                    RowError(
                        record.line,
                        "<row>",
                        f"cannot detect the format from the fields {sorted(row)}; pass the format explicitly",
                    )
                ]
            )
        return fmt
    raise DatasetError([RowError(0, "<file>", "the file has no rows")])


def _first_format(
    path: str | Path, field_map: dict[str, str] | None, limits: ReadLimits | None, report: ValidationReport
) -> bool:
    """Set `report.format` to the format of the first parseable row. When that row's format cannot be detected the
    scan stops there: the report is filled in as the scan leaves it (the rows before it, their errors, the file
    error) and False is returned. A file without parseable rows leaves the format None (True)."""
    prefix: list[BadRow] = []
    for record in iter_records(path, limits):
        if record.error is not None:
            prefix.append(BadRow(record.index, record.line, [record.error]))
            continue
        row = record.row
        if isinstance(row, dict) and field_map:
            row = apply_field_map(row, field_map)
        detected = detect_format(row) if isinstance(row, dict) else None
        if detected is not None:
            report.format = detected
            return True
        what = sorted(row) if isinstance(row, dict) else type(row).__name__
        report.rows = record.index + 1
        report.bad_rows = prefix
        report.file_errors.append(
            RowError(
                record.line, "<row>", f"cannot detect the format from the fields {what}; pass the format explicitly"
            )
        )
        return False
    return True


@dataclass
class ValidateStage:
    """The rows of one block checked against the format: counts and bad rows; with `keep_rows` (ingest under the
    quarantine policy) also the good rows (after `field_map`) and the quarantine file's lines."""

    fmt: str | None  # None only for a file without a parseable row
    field_map: dict[str, str] | None = None
    keep_rows: bool = False

    def __call__(self, records: Sequence[Record]) -> dict[str, Any]:
        valid = 0
        bad: list[BadRow] = []
        good: list[Any] = []
        quarantined: list[str] = []
        for record in records:
            row = record.row
            if record.error is not None:
                errors = [record.error]
            else:
                if isinstance(row, dict) and self.field_map:
                    row = apply_field_map(row, self.field_map)
                if self.fmt is None:  # the driver found no parseable row; the file changed under the scan
                    raise DatasetError([RowError(record.line, "<row>", "the file changed while it was read")])
                errors = [RowError(record.line, f, r) for f, r in validate_row(self.fmt, row)]
            if errors:
                bad.append(BadRow(record.index, record.line, errors))
                if self.keep_rows:
                    entry = {
                        "index": record.index,
                        "line": record.line,
                        "errors": [asdict(e) for e in errors],
                        "row": row,
                    }
                    if record.raw is not None:
                        entry["raw"] = record.raw
                    quarantined.append(json.dumps(entry, ensure_ascii=False, default=str) + "\n")
            else:
                valid += 1
                if self.keep_rows:
                    good.append(row)
        return {"rows": len(records), "valid": valid, "bad": bad, "good": good, "quarantined": quarantined}


def _record_blocks(
    path: str | Path, stage: Callable[[Sequence[Record]], Any], executor: Executor, limits: ReadLimits | None
) -> Iterator[Any]:
    """`executor.map_blocks`, honouring read `limits`: the local executor reads under them in this process; another
    executor reads with the default limits, so it refuses others."""
    from training_platform.data.executors import ExecutorError
    from training_platform.data.executors.base import blocks

    if limits is None:
        return executor.map_blocks(Path(path), stage)
    if executor.name != "local":
        if limits != ReadLimits():
            raise ExecutorError(f"executor: read limits apply to the local executor only, not {executor.name}")
        return executor.map_blocks(Path(path), stage)
    return (stage(block) for block in blocks(iter_records(path, limits), executor.block_rows))


def _scan(
    path: str | Path,
    fmt: str,
    field_map: dict[str, str] | None,
    on_block: Callable[[dict[str, Any]], None] | None = None,
    limits: ReadLimits | None = None,
    executor: Executor | None = None,
) -> ValidationReport:
    """Check every row: the format is settled here (`fmt`, else the first parseable row's), the rows are checked
    block by block on `executor` (default local) and merged in file order. `on_block(part)` gets each block's
    good rows and quarantine lines (the stage keeps them only when it is given)."""
    from training_platform.data.executors import get_executor

    _check_format(fmt)
    executor = executor or get_executor("local")
    report = ValidationReport(path=str(path), format=None if fmt == "auto" else fmt)
    if report.format is None and not _first_format(path, field_map, limits, report):
        report.executor = executor.describe()
        return report
    stage = ValidateStage(report.format, field_map or None, keep_rows=on_block is not None)
    for part in _record_blocks(path, stage, executor, limits):
        report.rows += part["rows"]
        report.valid_rows += part["valid"]
        report.bad_rows.extend(part["bad"])
        if on_block is not None:
            on_block(part)
    report.executor = executor.describe()  # after the run: a Ray executor knows its workers then
    if report.rows == 0:
        report.file_errors.append(RowError(0, "<file>", "the file has no rows"))
    return report


def validate_file(
    path: str | Path,
    *,
    fmt: str = "auto",
    field_map: dict[str, str] | None = None,
    limits: ReadLimits | None = None,
    executor: Executor | None = None,
) -> ValidationReport:
    """Check every row of the file (nothing is written). The format is the first row's unless `fmt` is given.
    A file over `limits` raises LimitExceeded. The rows are checked block by block on `executor` (default: local,
    in this process)."""
    return _scan(path, fmt, field_map, limits=limits, executor=executor)


def quarantine_path_for(dest: str | Path) -> Path:
    dest = Path(dest)
    return dest.with_name(f"{dest.stem}.quarantine.jsonl")


def ingest_file(
    path: str | Path,
    dest: str | Path,
    *,
    policy: Policy = "reject",
    fmt: str = "auto",
    field_map: dict[str, str] | None = None,
    quarantine: str | Path | None = None,
    limits: ReadLimits | None = None,
    executor: Executor | None = None,
) -> ValidationReport:
    """Validate and store. `reject`: any bad row (or file-level problem) -> nothing is written, report.accepted is
    False. `quarantine`: good rows to `dest`, bad rows to `quarantine` (default `<dest stem>.quarantine.jsonl`) as
    {"line", "index", "errors": [...], "row"}; written together, atomically. Rows are stored as read (after
    `field_map`), not converted. The rows are checked block by block on `executor` (default local); the outputs are
    written here, in the input's order."""
    if policy not in ("reject", "quarantine"):
        raise ValueError(f"--policy: must be reject or quarantine, got {policy!r}")
    quarantine = Path(quarantine) if quarantine is not None else quarantine_path_for(dest)
    if policy == "reject":
        report = _scan(path, fmt, field_map, limits=limits, executor=executor)
        report.policy = policy
        report.accepted = report.ok
        if not report.accepted:
            return report
        with RowWriter(dest) as writer:
            for record in iter_records(path, limits):
                writer.write(apply_field_map(record.row, field_map or {}) if field_map else record.row)
        report.output = str(dest)
        return report

    try:
        with (
            atomic_output(quarantine) as q_temp,
            RowWriter(dest) as writer,
            q_temp.open("w", encoding="utf-8") as q,
        ):

            def on_block(part: dict[str, Any]) -> None:
                q.writelines(part["quarantined"])
                writer.write_all(part["good"])

            report = _scan(path, fmt, field_map, on_block=on_block, limits=limits, executor=executor)
            if report.file_errors:  # not about single rows (unknown format, empty file): refuse like reject
                raise _Refused(report)
    except _Refused as refused:
        refused.report.policy = policy
        refused.report.accepted = False
        return refused.report
    report.policy = policy
    report.accepted = True
    report.output = str(dest)
    report.quarantine = str(quarantine) if report.bad_rows else None
    if not report.bad_rows:
        quarantine.unlink(missing_ok=True)
    return report


class _Refused(Exception):
    def __init__(self, report: ValidationReport):
        self.report = report

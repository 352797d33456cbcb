"""(Just over 600 lines: the content store, ingest and a dataset's life are one use case; operations are apart.)

Datasets as content-hashed versions: the content store, ingest (upload/register), versions, lineage, references
and deletion (the operations on a version: services/dataset_operations.py). Shared by the API
(`api/routes/datasets.py`) and the data worker (`workers/data_tasks.py`); the row-level work is the data factory's
domain code (`training_platform.data`).

Ingest (the `ingest` data job of an upload or registration): `prepare_ingest` validates a staged file under
the caps of docs/limits.md (no database), `store_ingest` records it as a version.

Content store (under TP_DATA_DIR):

    datasets/<sha[:2]>/<sha><suffix>        one immutable (read-only) file per distinct content
    datasets/quarantine/<dataset id>/...     rows an upload under policy `quarantine` kept aside
    datasets/reports/<dataset id>/...        full operation reports (the DB keeps a compacted copy)
    datasets/staging/                        uploaded (or registered) files waiting for their ingest data job
    datasets/tmp/                            ingest and operation outputs before they are stored

A version's `path` is stored relative to TP_DATA_DIR, so a training config can use it as `data.train_file` as it is
(and the run's manifest then records the same sha256). Two datasets holding the same content share one file.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Text, cast, or_, update
from sqlmodel import Session, col, select

from training_platform.core.errors import InvalidInput
from training_platform.core.path_policy import resolve_path
from training_platform.core.settings import Settings
from training_platform.core.timeutil import utcnow
from training_platform.data.operations import jsonable
from training_platform.data.operations.decontaminate import DecontaminateParams as DecontaminateParams
from training_platform.data.operations.score import ScoreParams as ScoreParams
from training_platform.db import crud
from training_platform.db.models import TERMINAL, Dataset, DatasetVersionRecord, Job, User, row_id
from training_platform.services.dataset_operations import PARAMS as PARAMS
from training_platform.services.dataset_operations import OperationInvalid as OperationInvalid
from training_platform.services.dataset_operations import OperationOutput as OperationOutput
from training_platform.services.dataset_operations import operation_paths as operation_paths
from training_platform.services.dataset_operations import run_operation as run_operation
from training_platform.services.dataset_operations import validate_operation as validate_operation

log = logging.getLogger("training_platform.datasets")
# (`X as X` above: the operations' names, importable from here too; they live in services/dataset_operations.py.)

STORE = "datasets"
SUPPORTED = (".jsonl", ".json", ".parquet", ".csv")
MAX_REPORTED_ERRORS = 50  # row problems listed in a refused upload's 422
MAX_REPORT_ITEMS = 200  # list items kept per list in the report stored in the database
MAX_LINEAGE = 1000
# Data jobs that are not operations on a version: `ingest` (validate + store an uploaded/registered file) and
# `audit` (compute a version's statistics).
INGEST, AUDIT = "ingest", "audit"
# The setting behind each cap of ReadLimits, named in refusals.
CAP_SETTINGS = {"rows": "TP_MAX_DATASET_ROWS", "bytes": "TP_MAX_DATASET_EXPANDED_MB", "row_bytes": "TP_MAX_ROW_MB"}


class IngestRefused(InvalidInput):
    """The file was refused (policy reject with bad rows, or a file-level problem); nothing was stored."""

    def __init__(self, errors: list[tuple[str, str]], *, rows: int = 0, bad_rows: int = 0, policy: str = "reject"):
        self.rows, self.bad_rows, self.policy = rows, bad_rows, policy
        super().__init__(errors, message="; ".join(f"{loc}: {msg}" for loc, msg in errors[:5]))


# ---------------------------------------------------------------------------------------------- content store


def store_dir(settings: Settings) -> Path:
    return settings.data_path / STORE


def tmp_dir(settings: Settings) -> Path:
    path = store_dir(settings) / "tmp"
    path.mkdir(parents=True, exist_ok=True)
    return path


def new_tmp_path(settings: Settings, suffix: str, prefix: str = "upload") -> Path:
    return tmp_dir(settings) / f"{prefix}-{uuid.uuid4().hex}{suffix}"


def staging_dir(settings: Settings) -> Path:
    path = store_dir(settings) / "staging"
    path.mkdir(parents=True, exist_ok=True)
    return path


def new_staging_path(settings: Settings, suffix: str) -> Path:
    return staging_dir(settings) / f"{uuid.uuid4().hex}{suffix}"


def read_limits(settings: Settings):
    """The caps on one dataset file (docs/limits.md) as the data layer's ReadLimits."""
    from training_platform.data.formats import ReadLimits

    return ReadLimits(
        max_rows=settings.max_dataset_rows,
        max_bytes=int(settings.max_dataset_expanded_mb * 2**20),
        max_row_bytes=int(settings.max_row_mb * 2**20),
    )


def content_relpath(sha256: str, suffix: str) -> str:
    return f"{STORE}/{sha256[:2]}/{sha256}{suffix}"


def absolute(relpath: str, settings: Settings) -> Path:
    path = Path(relpath)
    return path if path.is_absolute() else settings.data_path / path


def normalize_suffix(filename: str) -> str:
    """The content store suffix for a file name; ValueError for a type the data layer cannot read."""
    suffix = Path(filename or "").suffix.lower()
    if suffix == ".ndjson":
        return ".jsonl"
    if suffix not in SUPPORTED:
        raise ValueError(f"unsupported file type {suffix or '(none)'!r}; use one of {', '.join(SUPPORTED)}")
    return suffix


def _put_content(file: Path, relpath: str, sha256: str, settings: Settings) -> None:
    """Move `file` (a temp file in the store's filesystem) to its content address, read-only. If that content is
    already stored intact, `file` is left to the caller to remove; a stored file whose bytes no longer match its name
    (changed behind the platform's back) is replaced."""
    from training_platform.core.files import sha256_file

    target = absolute(relpath, settings)
    if target.is_file():
        if sha256_file(target) == sha256:
            return
        log.warning("content store: %s does not match its sha256; replacing it with the fresh copy", relpath)
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(file, target)
    with contextlib.suppress(OSError):
        target.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)


def compact(obj: Any, max_items: int = MAX_REPORT_ITEMS) -> Any:
    """A copy with every list cut to `max_items` (a sibling `<key>_total` tells the real length)."""
    if isinstance(obj, dict):
        out: dict[Any, Any] = {}
        for key, value in obj.items():
            if isinstance(value, list) and len(value) > max_items:
                out[key] = [compact(v, max_items) for v in value[:max_items]]
                out[f"{key}_total"] = len(value)
            else:
                out[key] = compact(value, max_items)
        return out
    if isinstance(obj, list):
        return [compact(v, max_items) for v in obj[:max_items]]
    return obj


def write_full_report(report: dict, dataset_id: int, name: str, settings: Settings) -> str:
    from training_platform.core.files import write_json

    rel = f"{STORE}/reports/{dataset_id}/{name}.json"
    write_json(absolute(rel, settings), report)
    return rel


# ---------------------------------------------------------------------------------------------- datasets & versions


def get_or_create_dataset(session: Session, owner: User, name: str, description: str = "") -> tuple[Dataset, bool]:
    """The owner's dataset of this name, created if missing. (A concurrent create loses on the unique constraint;
    the caller may retry.)"""
    found = session.exec(select(Dataset).where(Dataset.owner_id == owner.id, Dataset.name == name)).first()
    if found is not None:
        return found, False
    dataset = Dataset(owner_id=row_id(owner), name=name, description=description or "")
    session.add(dataset)
    session.flush()
    return dataset, True


def find_version(session: Session, dataset_id: int, sha256: str) -> DatasetVersionRecord | None:
    return session.exec(
        select(DatasetVersionRecord).where(
            DatasetVersionRecord.dataset_id == dataset_id, DatasetVersionRecord.sha256 == sha256
        )
    ).first()


def add_version(
    session: Session,
    dataset: Dataset,
    file: Path,
    *,
    suffix: str,
    operation: str,
    settings: Settings,
    fmt: str | None = None,
    parent: DatasetVersionRecord | None = None,
    recipe: dict | None = None,
    report: dict | None = None,
    stats: dict | None = None,
    job_id: int | None = None,
    described: Any = None,
    audit: dict | None = None,
) -> tuple[DatasetVersionRecord, bool]:
    """Describe `file` (sha256, rows, format, schema), move it into the content store and record the version.
    Returns (version, created): content this dataset already has returns that version (`file` is left in place for
    the caller to remove). Flushes; the caller commits."""
    from training_platform.data.versions import describe_dataset

    if described is None:  # callers that can, describe outside their transaction
        described = describe_dataset(file, fmt=fmt)
    existing = find_version(session, row_id(dataset), described.sha256)
    if existing is not None:
        return existing, False
    relpath = content_relpath(described.sha256, suffix)
    _put_content(file, relpath, described.sha256, settings)
    version = DatasetVersionRecord(
        dataset_id=row_id(dataset),
        sha256=described.sha256,
        path=relpath,
        format=described.format,
        rows=described.rows,
        size_bytes=described.size_bytes,
        row_schema=described.schema,
        stats=jsonable(stats or {}),
        report=jsonable(report) if report is not None else None,
        parent_version_id=parent.id if parent is not None else None,
        operation=operation,
        recipe=jsonable(recipe) if recipe is not None else None,
        job_id=job_id,
        audit=compact(jsonable(audit)) if audit is not None else None,
    )
    session.add(version)
    session.flush()
    dataset.current_version_id = version.id
    dataset.updated_at = utcnow()
    session.add(dataset)
    session.flush()
    return version, True


def lineage(session: Session, version: DatasetVersionRecord) -> list[DatasetVersionRecord]:
    """The ancestors of `version`, nearest first, up to the root (an upload or register)."""
    chain: list[DatasetVersionRecord] = []
    seen = {version.id}
    parent_id = version.parent_version_id
    while parent_id is not None and len(chain) < MAX_LINEAGE:
        parent = session.get(DatasetVersionRecord, parent_id)
        if parent is None or parent.id in seen:
            break
        chain.append(parent)
        seen.add(parent.id)
        parent_id = parent.parent_version_id
    return chain


# ---------------------------------------------------------------------------------------------- ingest


@dataclass
class Ingested:
    dataset: Dataset
    version: DatasetVersionRecord
    created: bool  # a new version (False: this dataset already had this content)
    report: dict[str, Any]  # this request's validation report


@dataclass
class PreparedIngest:
    """A validated file ready to be stored (`prepare_ingest`): the content to store, its description, the
    quarantined rows (a temp file, or None), the report and stats. `discard()` removes the temp files."""

    content: Path
    suffix: str
    described: Any  # data.versions.DatasetVersion of `content`
    report: dict[str, Any]
    stats: dict[str, Any]
    quarantine: Path | None
    bad_rows: int
    temps: list[Path]

    def discard(self) -> None:
        for temp in self.temps:
            with contextlib.suppress(OSError):
                temp.unlink(missing_ok=True)


def _refusal_items(report) -> list[tuple[str, str]]:
    items = [(f"line {e.line}: {e.field}" if e.line else e.field, e.reason) for e in report.file_errors]
    for bad in report.bad_rows:
        for error in bad.errors:
            items.append((f"line {error.line}: {error.field}", error.reason))
            if len(items) >= MAX_REPORTED_ERRORS:
                return items
    return items[:MAX_REPORTED_ERRORS]


def prepare_ingest(
    file: Path,
    *,
    suffix: str,
    settings: Settings,
    fmt: str | None = None,
    policy: str = "reject",
    source: str | None = None,
) -> PreparedIngest:
    """Validate `file` (a temp or staging file; consumed by `store_ingest` or `discard()`), without the database:
    the heavy part of an ingest, run by the ingest data job. Policy `reject`: any bad row refuses the whole file
    (IngestRefused). Policy `quarantine`: the good rows become the content, the bad rows go to a quarantine file.
    A file whose rows are all valid is stored byte for byte, so the version's sha256 is the sha256 of what was
    sent. The file is read under the caps of `read_limits` (rows, expanded bytes, bytes per row): a file over one
    is refused naming the setting."""
    from training_platform.core.files import sha256_file
    from training_platform.data.formats import DATA_FORMATS, DatasetError, LimitExceeded
    from training_platform.data.validate import ingest_file as quarantine_rows
    from training_platform.data.validate import validate_file
    from training_platform.data.versions import describe_dataset

    if policy not in ("reject", "quarantine"):
        raise ValueError(f"policy: must be reject or quarantine, got {policy!r}")
    if fmt is not None and fmt not in DATA_FORMATS:
        raise ValueError(f"format: unknown format {fmt!r}; use one of {', '.join(DATA_FORMATS)}")
    temps = [file]
    limits = read_limits(settings)
    try:
        try:
            checked = validate_file(file, fmt=fmt or "auto", limits=limits)
        except LimitExceeded as exc:
            raise IngestRefused(
                [(e.field, f"{e.reason} ({CAP_SETTINGS[exc.cap]})") for e in exc.rows], policy=policy
            ) from None
        except DatasetError as exc:
            raise IngestRefused(
                [
                    (f"line {e.line}: {e.field}" if e.line else e.field, e.reason)
                    for e in exc.rows[:MAX_REPORTED_ERRORS]
                ],
                policy=policy,
            ) from None
        except (UnicodeDecodeError, ValueError, OSError) as exc:
            raise IngestRefused([("<file>", f"cannot read the file: {exc}")], policy=policy) from None
        except Exception as exc:  # pyarrow and friends on a corrupt file  # noqa: BLE001
            raise IngestRefused(
                [("<file>", f"cannot read the file: {type(exc).__name__}: {exc}")], policy=policy
            ) from None
        bad = len(checked.bad_rows)
        if checked.file_errors or (bad and policy == "reject"):
            raise IngestRefused(_refusal_items(checked), rows=checked.rows, bad_rows=bad, policy=policy)
        if bad and checked.valid_rows == 0:
            raise IngestRefused(
                [("<file>", f"all {checked.rows} rows are invalid; nothing to store")]
                + _refusal_items(checked)[: MAX_REPORTED_ERRORS - 1],
                rows=checked.rows,
                bad_rows=bad,
                policy=policy,
            )
        content, quarantine = file, None
        if bad:  # quarantine: good rows to a new file, bad rows to their own
            content = new_tmp_path(settings, suffix, "good")
            quarantine = new_tmp_path(settings, ".jsonl", "quarantine")
            temps += [content, quarantine]
            assert checked.format is not None  # known once a row was valid
            result = quarantine_rows(
                file, content, policy="quarantine", fmt=checked.format, quarantine=quarantine, limits=limits
            )
            if not result.accepted:  # pragma: no cover - validate_file saw no file-level problem
                raise IngestRefused(_refusal_items(result), rows=result.rows, bad_rows=len(result.bad_rows))
        report = checked.to_dict(max_rows=MAX_REPORT_ITEMS)
        report.update(
            path=source, policy=policy, accepted=True, output=None, quarantine=None, uploaded_sha256=sha256_file(file)
        )
        stats = {"uploaded_rows": checked.rows, "valid_rows": checked.valid_rows, "quarantined_rows": bad}
        described = describe_dataset(content, fmt=checked.format, limits=limits)
        return PreparedIngest(
            content=content,
            suffix=suffix,
            described=described,
            report=report,
            stats=stats,
            quarantine=quarantine,
            bad_rows=bad,
            temps=temps,
        )
    except BaseException:
        for temp in temps:
            with contextlib.suppress(OSError):
                temp.unlink(missing_ok=True)
        raise


def store_ingest(
    session: Session,
    dataset: Dataset,
    prepared: PreparedIngest,
    *,
    settings: Settings,
    operation: str = "upload",
    recipe: dict | None = None,
    job_id: int | None = None,
    audit: dict | None = None,
) -> Ingested:
    """Store a prepared file as a version of `dataset` (its quarantine file next to the dataset's); the temp
    files are consumed. Flushes; the caller commits."""
    from training_platform.core.files import sha256_file

    try:
        report = dict(prepared.report)
        if prepared.quarantine is not None:
            rel = f"{STORE}/quarantine/{dataset.id}/{sha256_file(prepared.quarantine)}.quarantine.jsonl"
            target = absolute(rel, settings)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(prepared.quarantine, target)
            report["quarantine"] = rel
            report["quarantined_rows"] = prepared.bad_rows
        version, created = add_version(
            session,
            dataset,
            prepared.content,
            suffix=prepared.suffix,
            operation=operation,
            settings=settings,
            fmt=prepared.described.format,
            recipe=recipe,
            report=report,
            stats=prepared.stats,
            job_id=job_id,
            described=prepared.described,
        )
        report["output"] = version.path
        if created:
            version.report = jsonable(report)
            if audit is not None:
                version.audit = compact(jsonable(audit))
            session.add(version)
        return Ingested(dataset=dataset, version=version, created=created, report=jsonable(report))
    finally:
        prepared.discard()


STAGING_GRACE_S = 3600  # a staged file no unfinished ingest job names is removed once this old


def sweep_staging(session: Session, settings: Settings, *, older_than_s: float = STAGING_GRACE_S) -> list[str]:
    """Remove staged files that no unfinished ingest job names (their job was cancelled or deleted while queued),
    once older than `older_than_s` (an upload still streaming in, or just staged, is younger). Returns them."""
    import time

    root = staging_dir(settings)
    active = {
        config.get("staged")
        for config in session.exec(
            select(Job.config).where(
                Job.kind == "data", Job.algorithm == INGEST, col(Job.status).not_in([s.value for s in TERMINAL])
            )
        ).all()
        if isinstance(config, dict)
    }
    removed, now = [], time.time()
    for path in root.iterdir():
        rel = str(path.relative_to(settings.data_path))
        if rel in active:
            continue
        with contextlib.suppress(OSError):
            if path.is_file() and now - path.stat().st_mtime >= older_than_s:
                path.unlink()
                removed.append(rel)
    return removed


def compute_audit(path: Path, fmt: str | None) -> dict[str, Any]:
    """The audit report (`GET .../stats`) of a file, computed by the worker; a failure is recorded as
    {"error": ...} (the stats endpoint reports it)."""
    from training_platform.data.report import audit_file

    try:
        return jsonable(audit_file(path, fmt=fmt))
    except Exception as exc:  # noqa: BLE001 - the data layer's own errors, reported as such
        return {"error": f"{type(exc).__name__}: {exc}"}


def drop_if_empty(session: Session, dataset_id: int, *, except_job: int | None = None) -> bool:
    """Delete a dataset that has no version and no other unfinished data job (an upload that created it was
    refused). Flushes; the caller commits."""
    from sqlalchemy import func

    dataset = session.get(Dataset, dataset_id)
    if dataset is None:
        return False
    versions = session.exec(
        select(func.count()).select_from(DatasetVersionRecord).where(DatasetVersionRecord.dataset_id == dataset_id)
    ).one()
    if versions:
        return False
    active = session.exec(
        select(Job.id, Job.config).where(Job.kind == "data", col(Job.status).not_in([s.value for s in TERMINAL]))
    ).all()
    if any(
        job_id != except_job and isinstance(config, dict) and config.get("dataset_id") == dataset_id
        for job_id, config in active
    ):
        return False
    session.delete(dataset)
    session.flush()
    return True


# ---------------------------------------------------------------------------------------------- references & delete


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def referencing_jobs(session: Session, dataset: Dataset, settings: Settings) -> list[tuple[int, str]]:
    """Jobs that hold on to this dataset: any job whose config names one of its version files (e.g. a training
    job's `data.train_file`, whatever its status), and unfinished data jobs operating on it. [(job id, why)]."""
    versions = session.exec(select(DatasetVersionRecord).where(DatasetVersionRecord.dataset_id == dataset.id)).all()
    found: dict[int, str] = {}
    if versions:
        targets = {absolute(v.path, settings).resolve(): v for v in versions}
        # Every version path contains its sha256: let the database pick the candidates, then check the paths.
        text = cast(Job.config, Text)
        candidates = session.exec(
            select(Job.id, Job.config).where(or_(*[text.contains(v.sha256) for v in versions]))
        ).all()
        for job_id, config in candidates:
            assert job_id is not None  # a primary key
            for value in _strings(config):
                if "\x00" in value:
                    continue
                try:
                    hit = targets.get(resolve_path(value, settings))
                except (OSError, RuntimeError, ValueError):
                    continue
                if hit is not None:
                    found[job_id] = f"job {job_id} references version {hit.id} ({value})"
                    break
    active = session.exec(
        select(Job.id, Job.config).where(Job.kind == "data", col(Job.status).not_in([s.value for s in TERMINAL]))
    ).all()
    for job_id, config in active:
        assert job_id is not None  # a primary key
        if isinstance(config, dict) and config.get("dataset_id") == dataset.id:
            found.setdefault(job_id, f"data job {job_id} is still working on it")
    return sorted(found.items())


def delete_dataset(session: Session, dataset: Dataset, settings: Settings) -> list[Path]:
    """Delete the dataset's rows (versions, then the dataset). Returns the files and directories to remove once the
    transaction committed (content no other dataset shares, its quarantine and report directories)."""
    versions = session.exec(select(DatasetVersionRecord).where(DatasetVersionRecord.dataset_id == dataset.id)).all()
    paths = {v.path for v in versions}
    shared = (
        set(
            session.exec(
                select(DatasetVersionRecord.path).where(
                    col(DatasetVersionRecord.path).in_(paths), DatasetVersionRecord.dataset_id != dataset.id
                )
            ).all()
        )
        if paths
        else set()
    )
    session.exec(
        update(DatasetVersionRecord)
        .where(col(DatasetVersionRecord.dataset_id) == dataset.id)
        .values(parent_version_id=None)
        .execution_options(synchronize_session=False)
    )
    session.flush()
    crud.delete_gate_reports(session, [row_id(v) for v in versions])  # their quality-gate reports go with them
    for version in versions:
        session.delete(version)
    session.flush()
    session.delete(dataset)
    session.flush()
    remove = [absolute(p, settings) for p in sorted(paths - shared)]
    remove += [store_dir(settings) / "quarantine" / str(dataset.id), store_dir(settings) / "reports" / str(dataset.id)]
    return remove


def remove_files(paths: list[Path], settings: Settings) -> None:
    root = store_dir(settings).resolve()
    for path in paths:
        try:
            resolved = path.resolve()
        except OSError:
            continue
        if not resolved.is_relative_to(root) or resolved == root:
            log.warning("not removing %s: outside the dataset store %s", path, root)
            continue
        if resolved.is_dir():
            shutil.rmtree(resolved, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                resolved.unlink(missing_ok=True)

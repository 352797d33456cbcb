"""Read a run directory while the training core writes it, and mirror it into the database.

The core appends to `metrics.jsonl` and `manifest.jsonl` (one JSON object per line). We read them incrementally:
the byte offset is remembered, a partial last line waits for its newline, and a file that was rewritten (on
`--resume` the core truncates metrics.jsonl to the checkpoint's step with an atomic replace: a new inode, usually a
smaller size) is read again from its start. Re-reading is harmless: metric points are unique per (job, name, step)
and checkpoints are upserted.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from sqlmodel import Session

from training_platform.db import crud

log = logging.getLogger("training_platform.workers")

# Not metrics: the step is the x axis, ts the wall clock of the record.
NON_METRIC_KEYS = {"step", "ts"}


class JsonlTail:
    """Incremental reader of an append-only JSONL file that may be replaced (rewritten) as a whole."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.offset = 0
        self._ident: tuple[int, int] | None = None
        self._partial = b""
        self.rewrites = 0  # how often the file was replaced or shrank since we first saw it

    def read_new(self) -> list[dict]:
        """Complete new records since the last call (a partial last line is kept for the next call)."""
        try:
            f = self.path.open("rb")
        except FileNotFoundError:
            return []
        with f:
            st = os.fstat(f.fileno())
            ident = (st.st_dev, st.st_ino)
            if ident != self._ident or st.st_size < self.offset:
                if self._ident is not None:
                    self.rewrites += 1
                self._ident, self.offset, self._partial = ident, 0, b""
            if st.st_size == self.offset:
                return []
            f.seek(self.offset)
            data = f.read()
        self.offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()  # b"" when the data ended with a newline
        records = []
        for line in lines:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                log.warning("%s: skipping an unreadable line (%s): %.200r", self.path, exc, line)
                continue
            if isinstance(record, dict):
                records.append(record)
        return records


def metric_points(record: dict) -> list[tuple[int, str, float]]:
    """(step, name, value) for every finite numeric value of one metrics.jsonl record (nulls, bools, strings and
    lists are skipped)."""
    step = record.get("step")
    if not isinstance(step, int) or isinstance(step, bool):
        return []
    points = []
    for name, value in record.items():
        if name in NON_METRIC_KEYS or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if not math.isfinite(value) or len(name) > 128:
            continue
        points.append((step, name, float(value)))
    return points


def checkpoint_digest(files: dict[str, tuple[str, int]]) -> tuple[str, int]:
    """sha256 over the sorted `relpath:sha256` lines (one per file, newline-terminated) and the total size."""
    lines = "".join(f"{rel}:{sha}\n" for rel, (sha, _) in sorted(files.items()))
    return hashlib.sha256(lines.encode()).hexdigest(), sum(size for _, size in files.values())


@dataclass
class RunIngest:
    """Mirrors one run directory into the database for one job. Call `sync()` periodically and once more (with
    `final=True`) after the training process exited.

    What was read but not yet committed stays pending and is written again by the next call, so a failed
    transaction (a database blip) loses nothing; every write is idempotent (unique metric points, upserts).

    `hold_above_step`: when resuming from the checkpoint at step S, metrics.jsonl still holds the previous attempt's
    lines after S until the core truncates (rewrites) it; until that rewrite is seen, only steps <= S are taken.
    """

    job_id: int
    run_dir: Path
    hold_above_step: int | None = None
    max_step: int = 0
    registered: int = 0  # checkpoints registered (committed) so far: a change means new checkpoints
    _metrics: JsonlTail = field(init=False)
    _manifest: JsonlTail = field(init=False)
    _ckpt_files: dict[str, dict[str, tuple[str, int]]] = field(default_factory=dict, init=False)
    _registered: dict[str, str] = field(default_factory=dict, init=False)  # rel dir -> digest committed
    _removed: set[str] = field(default_factory=set, init=False)
    _touched: set[str] = field(default_factory=set, init=False)
    _pending_points: list[tuple[int, str, float]] = field(default_factory=list, init=False)
    _pending_logged_at: dict[int, datetime] = field(default_factory=dict, init=False)  # step -> its row's ts
    _pending_removed: list[str] = field(default_factory=list, init=False)
    _pending_registered: dict[str, str] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.run_dir = Path(self.run_dir)
        self._metrics = JsonlTail(self.run_dir / "metrics.jsonl")
        self._manifest = JsonlTail(self.run_dir / "manifest.jsonl")

    def sync(self, *, final: bool = False) -> int:
        """Read what is new and write it in one transaction. Returns the number of metric points written."""
        from training_platform.db.session import session_scope

        with session_scope() as session:
            written = self.poll(session, final=final)
        self.committed()
        return written

    def poll(self, session: Session, *, final: bool = False) -> int:
        """Read what is new and write everything pending into `session`; call `committed()` after the commit."""
        self._read_metrics()
        self._read_manifest()
        points = self._pending_points
        if points:
            crud.add_metric_points(session, self.job_id, points, self._pending_logged_at)
        self._write_checkpoints(session, final=final)
        return len(points)

    def committed(self) -> None:
        self._pending_points = []
        self._pending_logged_at = {}
        self._pending_removed = []
        self.registered += len(set(self._pending_registered) - set(self._registered))
        self._registered.update(self._pending_registered)
        self._pending_registered = {}
        self._touched = set()

    # -- metrics

    def _read_metrics(self) -> None:
        rewrites_before = self._metrics.rewrites
        seen_before = self._metrics.offset > 0
        records = self._metrics.read_new()
        if self._metrics.rewrites != rewrites_before or (not seen_before and not self._metrics.path.exists()):
            # The core truncated the file, or there was none to truncate: everything in it is this attempt's.
            self.hold_above_step = None
        for record in records:
            rec_points = metric_points(record)
            if not rec_points:
                continue
            step = rec_points[0][0]
            if self.hold_above_step is not None and step > self.hold_above_step:
                continue
            self.max_step = max(self.max_step, step)
            self._pending_points.extend(rec_points)
            ts = record.get("ts")
            if isinstance(ts, int | float) and not isinstance(ts, bool) and math.isfinite(ts) and 0 < ts < 4e9:
                self._pending_logged_at[step] = datetime.fromtimestamp(ts, UTC)

    # -- checkpoints

    def _read_manifest(self) -> None:
        for entry in self._manifest.read_new():
            kind, path = entry.get("kind"), str(entry.get("path", ""))
            parts = Path(path).parts
            if kind == "checkpoint" and len(parts) >= 3 and parts[0] == "checkpoints":
                rel_dir, rel_file = str(Path(*parts[:2])), str(Path(*parts[2:]))
                self._ckpt_files.setdefault(rel_dir, {})[rel_file] = (
                    str(entry.get("sha256")),
                    int(entry.get("bytes") or 0),
                )
                self._removed.discard(rel_dir)  # saved again after a removal
                self._touched.add(rel_dir)
            elif kind == "removed" and path.startswith("checkpoints/"):
                self._removed.add(path)
                self._pending_removed.append(path)

    def _write_checkpoints(self, session: Session, *, final: bool) -> None:
        for rel_dir in sorted(self._ckpt_files):
            if rel_dir in self._removed:
                if rel_dir in self._pending_removed and rel_dir not in self._registered:
                    # Rotated away before we saw it complete: keep it in the history as the manifest recorded it.
                    self._upsert(session, rel_dir, self._ckpt_files[rel_dir])
            elif rel_dir in self._touched or rel_dir not in self._registered:
                self._register(session, rel_dir, final=final)
        if self._pending_removed:
            crud.mark_checkpoints_removed(session, self.job_id, [str(self.run_dir / p) for p in self._pending_removed])

    def _register(self, session: Session, rel_dir: str, *, final: bool) -> None:
        files = self._ckpt_files[rel_dir]
        directory = self.run_dir / rel_dir
        on_disk = (
            {str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file()}
            if directory.is_dir()
            else set()
        )
        if not on_disk or not on_disk <= set(files):
            if final:
                log.warning(
                    "job %s: checkpoint %s is not completely recorded in the manifest; not registered",
                    self.job_id,
                    rel_dir,
                )
            return  # the core is still hashing its files into the manifest: next poll
        self._upsert(session, rel_dir, {k: v for k, v in files.items() if k in on_disk})

    def _upsert(self, session: Session, rel_dir: str, files: dict[str, tuple[str, int]]) -> None:
        digest, size = checkpoint_digest(files)
        if self._registered.get(rel_dir) == digest:
            return
        step = int(rel_dir.rsplit("_", 1)[-1])
        crud.upsert_checkpoint(
            session, self.job_id, step=step, path=str(self.run_dir / rel_dir), sha256=digest, size_bytes=size
        )
        self._pending_registered[rel_dir] = digest

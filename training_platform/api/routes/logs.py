"""A job's train.log: the last lines, followed live as Server-Sent Events, or downloaded with the job's error
report and failure bundle."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Literal

from fastapi import APIRouter, Query
from fastapi.responses import FileResponse, StreamingResponse
from sqlmodel import Session
from starlette.concurrency import run_in_threadpool

from training_platform.api import schemas
from training_platform.api.deps import VisibleJob
from training_platform.api.errors import not_found
from training_platform.db.models import TERMINAL, Job, JobStatus, row_id
from training_platform.db.session import get_engine
from training_platform.training.rundir import RunDir

router = APIRouter(prefix="/jobs", tags=["logs"])

POLL_INTERVAL_S = 0.25
KEEPALIVE_S = 15.0
READ_CHUNK = 1 << 20


def tail_lines(path: Path, n: int, block: int = 1 << 16) -> list[str]:
    """The last `n` lines, reading the file from its end (a multi-GB log costs a few blocks)."""
    try:
        f = path.open("rb")
    except FileNotFoundError:
        return []
    with f:
        pos = f.seek(0, 2)
        data = b""
        while pos > 0 and data.count(b"\n") <= n:
            size = min(block, pos)
            pos -= size
            f.seek(pos)
            data = f.read(size) + data
    return data.decode("utf-8", errors="replace").splitlines()[-n:] if n else []


def _log_path(run_dir: str | None) -> Path | None:
    if not run_dir:
        return None
    eval_log = Path(run_dir) / "eval.log"  # an evaluation job's output directory
    return eval_log if eval_log.exists() else RunDir(run_dir).log_file


@router.get("/{job_id}/logs", response_model=schemas.LogLines)
def job_logs(job: VisibleJob, tail: Annotated[int, Query(ge=1, le=10_000)] = 200):
    path = _log_path(job.run_dir)
    return {"lines": tail_lines(path, tail) if path else []}


# What a job's page offers to download: its whole log, the error report and the failure bundle (logs, reports and
# the effective config, redacted when written; never weights or secrets: RunDir.write_failpack).
DOWNLOADS = {
    "train.log": "text/plain; charset=utf-8",
    "eval.log": "text/plain; charset=utf-8",
    "error.json": "application/json",
    "failpack.tgz": "application/gzip",
}


@router.get(
    "/{job_id}/files/{name}",
    response_class=FileResponse,
    responses={
        200: {
            "content": {t: {} for t in sorted(set(DOWNLOADS.values()))},
            "description": "The file, as an attachment named job-<id>-<name>.",
        }
    },
)
def download_job_file(job: VisibleJob, name: Literal["train.log", "eval.log", "error.json", "failpack.tgz"]):
    """Download one of the job's files: `train.log` (`eval.log` for evaluations), `error.json` and `failpack.tgz`
    (written when a run fails). 404 when the job has not written it."""
    path = Path(job.run_dir) / name if job.run_dir else None
    if path is None or not path.is_file():
        raise not_found(f"{name} of job {job.id}")
    return FileResponse(path, media_type=DOWNLOADS[name], filename=f"job-{job.id}-{name}")


def _job_state(job_id: int) -> tuple[str, str | None] | None:
    with Session(get_engine()) as session:
        job = session.get(Job, job_id)
        return None if job is None else (job.status, job.run_dir)


def _read_from(path: Path | None, offset: int) -> tuple[bytes, int]:
    """New bytes from `offset` (restarting at 0 if the file was truncated); returns (data, new offset)."""
    if path is None:
        return b"", offset
    try:
        with path.open("rb") as f:
            size = f.seek(0, 2)
            if size < offset:
                offset = 0
            f.seek(offset)
            data = f.read(READ_CHUNK)
    except FileNotFoundError:
        return b"", offset
    return data, offset + len(data)


def _sse(line: str) -> str:
    return f"data: {line}\n\n"


async def _follow(job_id: int, tail: int | None) -> AsyncIterator[str]:
    offset = 0
    pending = b""
    last_sent = time.monotonic()
    if tail:
        state = await run_in_threadpool(_job_state, job_id)
        path = _log_path(state[1]) if state else None
        if path is not None and path.exists():
            offset = path.stat().st_size
            for line in await run_in_threadpool(tail_lines, path, tail):
                yield _sse(line)
    while True:
        state = await run_in_threadpool(_job_state, job_id)
        if state is None:  # deleted meanwhile
            yield "event: end\ndata: deleted\n\n"
            return
        status, run_dir = state
        data, offset = await run_in_threadpool(_read_from, _log_path(run_dir), offset)
        if data:
            pending += data
            *complete, pending = pending.split(b"\n")
            for raw in complete:
                yield _sse(raw.decode("utf-8", errors="replace").rstrip("\r"))
            last_sent = time.monotonic()
        if JobStatus(status) in TERMINAL and len(data) < READ_CHUNK:
            # The status was terminal before this read reached the end of the file: nothing more will come.
            if pending:
                yield _sse(pending.decode("utf-8", errors="replace").rstrip("\r"))
            yield f"event: end\ndata: {status}\n\n"
            return
        if len(data) == READ_CHUNK:
            continue  # more to drain
        if time.monotonic() - last_sent > KEEPALIVE_S:
            yield ": keepalive\n\n"
            last_sent = time.monotonic()
        await asyncio.sleep(POLL_INTERVAL_S)


@router.get(
    "/{job_id}/logs/stream",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {"text/event-stream": {}},
            "description": "`data: <line>` per log line; `event: end` once the job finished.",
        }
    },
)
def stream_job_logs(
    job: VisibleJob,
    tail: Annotated[
        int | None, Query(ge=1, le=10_000, description="Start with the last N lines instead of the whole file.")
    ] = None,
):
    """Follows train.log as it grows (Server-Sent Events). Ends with `event: end` when the job is finished and
    the file is drained."""
    return StreamingResponse(
        _follow(row_id(job), tail),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )

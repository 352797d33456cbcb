"""Helpers for the dataset tests: rows, uploads, the content store on disk, a real worker process."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from api_helpers import run_data_job  # noqa: F401 - shared with the API tests (tests/api is on sys.path)

REDIS_URL = os.environ.get("TP_TEST_DATASETS_REDIS_URL", "redis://127.0.0.1:6379/12")
TERMINAL = {"succeeded", "failed", "cancelled"}


def chat(user: str, assistant: str) -> dict:
    return {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]}


def jsonl(rows: list[Any]) -> bytes:
    return "".join(json.dumps(r) + "\n" if not isinstance(r, str) else r + "\n" for r in rows).encode()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Ingest:
    """The outcome of an upload/register once its `ingest` data job ended, shaped like the synchronous answers of
    before: 201 (a new version), 200 (content the dataset had), 422 (refused: `detail`, `rows`, `bad_rows`,
    `stored`). `accepted` is the API's own 202 answer, `job` the finished job."""

    def __init__(self, accepted, job: dict, api):
        self.accepted, self.job = accepted, job
        result = job["config"].get("result") or {}
        if job["status"] == "succeeded":
            dataset_id, version_id = result["dataset_id"], result["version_id"]
            self.status_code = 201 if result["created"] else 200
            self.body = {
                "dataset": api.get(f"/datasets/{dataset_id}", user="root").json(),
                "version": api.get(f"/datasets/{dataset_id}/versions/{version_id}", user="root").json(),
                "created": result["created"],
                "job": job,
            }
        else:
            self.status_code = 422
            self.body = {**result, "job": job, "error": job["error"]}
        self.text = json.dumps(self.body, default=str)

    def json(self):
        return self.body


def follow(api, accepted, user: str = "alice"):
    """The API's answer if it was not a 202; else the ingest job run to its end, as an Ingest."""
    if accepted.status_code != 202:
        return accepted
    job_id = accepted.json()["job"]["id"]
    run_data_job(job_id)
    return Ingest(accepted, api.get(f"/jobs/{job_id}", user=user).json(), api)


def upload(api, name: str, content: bytes, filename: str = "data.jsonl", user: str = "alice", **fields):
    """Upload and follow the ingest job to its end (see Ingest)."""
    return follow(api, upload_only(api, name, content, filename, user, **fields), user)


def upload_only(api, name: str, content: bytes, filename: str = "data.jsonl", user: str = "alice", **fields):
    return api.post(
        "/datasets",
        user=user,
        files={"file": (filename, content, "application/octet-stream")},
        data={"name": name, **fields},
    )


def store_files(data_dir: Path) -> list[str]:
    """Every file under TP_DATA_DIR/datasets (content store, quarantine, reports, temp files), relative."""
    root = data_dir / "datasets"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if root.exists() else []


def tmp_files(data_dir: Path) -> list[str]:
    return [f for f in store_files(data_dir) if f.startswith("tmp/")]


def staged_files(data_dir: Path) -> list[str]:
    return [f for f in store_files(data_dir) if f.startswith("staging/")]


@contextmanager
def api_context(data_dir: Path, kind: str, tmp: Path) -> Iterator:
    """The API (TestClient, users root/alice/bob) on a fresh `kind` database (sqlite | postgresql)."""
    from api_helpers import database, running_api

    # demo/ is a symlink out of TP_DATA_DIR: its target is an allowed root (as a model root would be).
    env = {
        "REDIS_URL": REDIS_URL,
        "TP_MODEL_ROOTS": str((data_dir / "demo").resolve()),
        "TP_MAX_UPLOAD_MB": "1",
        "TP_HEARTBEAT_INTERVAL": "1",
        "TP_METRICS_BATCH_INTERVAL": "0.5",
        "TP_MIN_FREE_DISK_MB": "1",
    }
    with database(kind, tmp) as url, running_api(data_dir, url, **env) as api:
        yield api


def start_worker(data_dir: Path, name: str, queues: str = "train,data"):
    """`tp worker --queues train,data` as a real process (its own process group; stop() kills the pool too)."""
    from _wk import Proc

    argv = [sys.executable, "-m", "training_platform.cli", "worker", "--queues", queues, "--name", f"{name}@%h"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return Proc(argv, env, data_dir / f"{name}.log").wait_ready(timeout=60)


def wait_job(api, job_id: int, timeout: float = 90, worker=None) -> dict:
    from _wk import wait_for

    def done():
        job = api.get(f"/jobs/{job_id}").json()
        return job if job["status"] in TERMINAL else None

    try:
        return wait_for(done, timeout, interval=0.25, what=f"job {job_id} to finish")
    except AssertionError:
        events = api.get(f"/jobs/{job_id}/events").json()
        raise AssertionError(
            f"job {job_id} did not finish: {api.get(f'/jobs/{job_id}').json()}\n{events}\n"
            f"{worker.log()[-4000:] if worker else ''}"
        ) from None

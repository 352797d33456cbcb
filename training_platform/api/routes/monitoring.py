"""The operations dashboard: jobs by status, queue depth, workers (from their heartbeats), host and GPUs.

Admins see everything. A plain user sees their own jobs by status, the queue depths and worker counts (aggregate
figures), the workers busy with their own jobs, and the host without server paths: other users' job ids, worker
names and paths only for admins. `/monitoring/ray` shows the Ray cluster when TP_RAY_ADDRESS is set."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import APIRouter
from sqlalchemy import func
from sqlmodel import col, select

from training_platform.api import broker
from training_platform.api.deps import CurrentUser, SessionDep, SettingsDep
from training_platform.api.schemas import as_utc
from training_platform.core.settings import current_settings
from training_platform.core.timeutil import utcnow
from training_platform.db.models import Job, JobStatus

router = APIRouter(prefix="/monitoring", tags=["monitoring"])


def system_info(data_path, show_path: bool = True) -> dict[str, Any]:
    import psutil

    mem = psutil.virtual_memory()
    info: dict[str, Any] = {
        "cpu_percent": psutil.cpu_percent(interval=None),
        "cpu_count": psutil.cpu_count(),
        "load_avg": list(psutil.getloadavg()) if hasattr(psutil, "getloadavg") else None,
        "memory": {
            "total_mb": mem.total // 2**20,
            "available_mb": mem.available // 2**20,
            "used_mb": (mem.total - mem.available) // 2**20,
            "percent": mem.percent,
        },
    }
    shown = str(data_path) if show_path else "TP_DATA_DIR"
    try:
        disk = psutil.disk_usage(str(data_path))
        info["disk"] = {
            "path": shown,
            "total_mb": disk.total // 2**20,
            "free_mb": disk.free // 2**20,
            "used_mb": disk.used // 2**20,
            "percent": disk.percent,
        }
    except OSError as exc:
        info["disk"] = {"path": shown, "error": type(exc).__name__ if not show_path else str(exc)}
    return info


def gpu_info() -> list[dict[str, Any]]:
    """CUDA devices via torch (imported only if installed; the API does not need it otherwise)."""
    try:
        import torch
    except ImportError:
        return []
    if not torch.cuda.is_available():
        return []
    gpus = []
    for i in range(torch.cuda.device_count()):
        entry: dict[str, Any] = {"index": i, "name": torch.cuda.get_device_name(i)}
        try:
            free, total = torch.cuda.mem_get_info(i)
            entry.update(memory_total_mb=total // 2**20, memory_used_mb=(total - free) // 2**20)
        except Exception:  # noqa: BLE001 - a busy/locked device still gets listed
            pass
        gpus.append(entry)
    return gpus


@router.get("/dashboard")
def dashboard(session: SessionDep, user: CurrentUser, settings: SettingsDep) -> dict[str, Any]:
    mine = [] if user.is_admin else [Job.owner_id == user.id]
    by_status = {s.value: 0 for s in JobStatus}
    for status, count in session.exec(select(Job.status, func.count()).where(*mine).group_by(Job.status)).all():
        by_status[status] = count
    queued = {kind: 0 for kind in broker.JOB_KINDS}
    rows = session.exec(
        select(Job.kind, func.count()).where(Job.status == JobStatus.queued.value).group_by(Job.kind)
    ).all()
    for kind, count in rows:
        queued[kind] = count
    active = session.exec(
        select(Job)
        .where(col(Job.worker).is_not(None), col(Job.status).in_([JobStatus.preflight.value, JobStatus.running.value]))
        .order_by(Job.worker)
    ).all()
    cutoff = utcnow() - timedelta(seconds=settings.heartbeat_timeout_s)
    workers = []
    busy, alive = set(), set()
    for job in active:
        beat = as_utc(job.heartbeat_at)
        is_alive = beat is not None and beat >= cutoff
        busy.add(job.worker)
        if is_alive:
            alive.add(job.worker)
        if user.is_admin or job.owner_id == user.id:
            workers.append(
                {"name": job.worker, "job_id": job.id, "status": job.status, "heartbeat_at": beat, "alive": is_alive}
            )
    return {
        "jobs_by_status": by_status,
        "scope": "all" if user.is_admin else "own",
        "queue_depth": {**queued, "broker": broker.queue_depths()},
        "workers": workers,
        "worker_counts": {"busy": len(busy), "alive": len(alive)},
        "system": system_info(settings.data_path, show_path=user.is_admin),
        "gpus": gpu_info(),
    }


@router.get("/ray")
def ray_cluster(user: CurrentUser, settings: SettingsDep) -> dict[str, Any]:
    """The Ray cluster of TP_RAY_ADDRESS: nodes, CPUs and GPUs (total and in use), and its dashboard when it runs.
    Read from the cluster's GCS at most every 10 s for all API processes (see training/ray_cluster.py). Everyone
    sees the figures; node addresses, the cluster address, the dashboard link and the error's detail are for admins."""
    address = current_settings().ray_address
    if not address:
        return {"configured": False}
    from training_platform.training import ray_cluster as status

    snap = status.cached_snapshot(address, settings.data_path / "ray")
    out: dict[str, Any] = {
        "configured": True,
        "checked_at": datetime.fromtimestamp(snap["checked_at"], UTC),
        "error": None,
    }
    if "error" in snap:
        out["error"] = snap["error"] if user.is_admin else "the Ray cluster cannot be read (an admin sees why)"
        return out
    nodes = snap["nodes"]
    out.update(
        nodes_alive=sum(n["state"] != "DEAD" for n in nodes), cpus=snap["totals"]["CPU"], gpus=snap["totals"]["GPU"]
    )
    if user.is_admin:
        out.update(address=address, dashboard_url=snap["dashboard_url"], nodes=nodes)
    return out

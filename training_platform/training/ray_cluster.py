"""What a Ray cluster has: its nodes, CPUs and GPUs (total and in use) and its dashboard, read from the GCS.

Read without joining the cluster as a driver (no `ray.init`): a `GcsClient` and the autoscaler's status call,
the same path as `ray status`. It runs in a child process with a deadline, so an API process or a worker never
imports Ray's C++ client, nor hangs on an address that does not answer. Needs the GCS address (host:port);
`ray://` (Ray Client) addresses cannot be read this way and say so.

Used by preflight (does the cluster have the nodes, CPUs and GPUs the job asks for? `plan_workers`), by the Ray
launcher (same rule, on the cluster it joined), and by the monitoring page and /metrics (`cached_snapshot`: one read
per `max_age_s` shared by every process through a file).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from training_platform.core.ray_client import unreachable

log = logging.getLogger(__name__)

SNAPSHOT_TIMEOUT_S = 15.0
CACHE_MAX_AGE_S = 10.0


def _collect(address: str) -> dict[str, Any]:
    """In the child: the snapshot (see `snapshot`)."""
    from ray._raylet import GcsClient  # type: ignore[attr-defined]  # ray's _raylet.pyi omits it; the .so has it
    from ray.autoscaler.v2.sdk import get_cluster_status

    status = get_cluster_status(address)
    nodes = []
    totals: dict[str, dict[str, float]] = {"CPU": {"total": 0.0, "used": 0.0}, "GPU": {"total": 0.0, "used": 0.0}}
    for node in [*status.active_nodes, *status.idle_nodes]:
        usage = {
            u.resource_name: {"total": u.total, "used": u.used}
            for u in (node.resource_usage.usage if node.resource_usage else [])
        }
        resources = {name: usage.get(name, {"total": 0.0, "used": 0.0}) for name in ("CPU", "GPU")}
        for name, figures in resources.items():
            totals[name]["total"] += figures["total"]
            totals[name]["used"] += figures["used"]
        nodes.append(
            {
                "node_id": node.node_id,
                "ip": node.ip_address,
                "state": node.node_status,
                "is_head": "node:__internal_head__" in usage,
                "resources": resources,
            }
        )
    nodes.sort(key=lambda n: (not n["is_head"], n["ip"] or "", n["node_id"]))
    dashboard = GcsClient(address=address).internal_kv_get(b"dashboard", b"dashboard")
    url = dashboard.decode() if dashboard else None
    if url and unreachable(url.split("://", 1)[-1].split("/", 1)[0], timeout_s=1.0) is not None:
        url = None  # Ray records the address even when started without its dashboard
    if url and "://" not in url:
        url = f"http://{url}"
    return {"address": address, "nodes": nodes, "totals": totals, "dashboard_url": url}


def _reason(stderr: str) -> str | None:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in reversed(lines):
        if "Check failed:" in line:
            return line.split("Check failed:", 1)[1].replace("!result.hasError()", "").strip()[:500]
    for line in reversed(lines):
        if "rror" in line and not line.startswith("File "):
            return line[:500]
    return lines[-1][:500] if lines else None


def snapshot(address: str, timeout_s: float = SNAPSHOT_TIMEOUT_S) -> dict[str, Any]:
    """`{"address", "nodes": [{node_id, ip, state, is_head, resources: {CPU|GPU: {total, used}}}], "totals",
    "dashboard_url", "checked_at"}`, or `{"address", "error", "checked_at"}` when the cluster cannot be read."""
    checked_at = time.time()
    if address.startswith("ray://"):
        return {
            "address": address,
            "checked_at": checked_at,
            "error": "a ray:// (Ray Client) address cannot be inspected: set TP_RAY_ADDRESS to the head's GCS "
            "address (host:port) to see the cluster's nodes",
        }
    if (problem := unreachable(address)) is not None:
        return {"address": address, "checked_at": checked_at, "error": problem}
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")}
    try:
        done = subprocess.run(
            [sys.executable, "-m", __name__, address],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {
            "address": address,
            "checked_at": checked_at,
            "error": f"the Ray cluster at {address} did not answer within {timeout_s:g} s",
        }
    try:
        result = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):  # Ray's C++ client aborted (e.g. a missing token file): its reason
        result = {"address": address, "error": _reason(done.stderr) or f"exit code {done.returncode}"}
    result["checked_at"] = checked_at
    return result


def cached_snapshot(address: str, cache_dir: Path, max_age_s: float = CACHE_MAX_AGE_S) -> dict[str, Any]:
    """The snapshot, read again at most every `max_age_s` by all processes sharing `cache_dir` (one of them reads,
    the others wait for it on a file lock and take its result)."""
    cache = cache_dir / "cluster_status.json"
    with contextlib.suppress(OSError):
        cache_dir.mkdir(parents=True, exist_ok=True)

    def fresh() -> dict[str, Any] | None:
        with contextlib.suppress(OSError, ValueError):
            data = json.loads(cache.read_text())
            if data.get("address") == address and time.time() - float(data.get("checked_at", 0)) < max_age_s:
                return data
        return None

    if (data := fresh()) is not None:
        return data
    try:
        lock = open(cache_dir / "cluster_status.lock", "w")  # noqa: SIM115 - closed by the with below
    except OSError as exc:
        log.warning("cannot cache the Ray cluster status in %s: %s", cache_dir, exc)
        return snapshot(address)
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (data := fresh()) is not None:
            return data
        data = snapshot(address)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(data))
            os.replace(tmp, cache)
        except OSError as exc:  # the figures are still right; only the sharing between processes is lost
            log.warning("cannot cache the Ray cluster status in %s: %s", cache_dir, exc)
        return data


def plan_workers(
    nodes: list[dict[str, Any]], *, num_nodes: int, num_devices: int, use_gpu: bool
) -> tuple[int, list[tuple[str, str]]]:
    """CPUs to give each of the `num_nodes * num_devices` workers, or the problems as (field, reason).

    `nodes` are alive nodes with `resources: {CPU|GPU: {total, ...}}`. Each worker gets an equal share of the
    smallest node's CPUs (at least 1), so the job's processes do not fight over cores."""
    world = num_nodes * num_devices
    problems: list[tuple[str, str]] = []
    if len(nodes) < num_nodes:
        problems.append(("resources.num_nodes", f"{num_nodes} nodes requested, the Ray cluster has {len(nodes)} alive"))
        return 0, problems

    def total(name: str) -> float:
        return sum(n["resources"].get(name, {}).get("total", 0.0) for n in nodes)

    if use_gpu:
        if total("GPU") < world:
            problems.append(
                ("resources.num_devices", f"{world} GPUs needed in all, the Ray cluster has {total('GPU'):g}")
            )
        cpus = 1
    else:
        smallest = min(int(n["resources"].get("CPU", {}).get("total", 0)) for n in nodes)
        cpus = max(1, smallest // num_devices)
    if total("CPU") < world * cpus:
        problems.append(
            ("resources.num_devices", f"{world} workers need {world * cpus} CPUs, the Ray cluster has {total('CPU'):g}")
        )
    return cpus, problems


def check(address: str, *, num_nodes: int, num_devices: int, use_gpu: bool) -> list[tuple[str, str]]:
    """Preflight: what the cluster at `address` lacks for the job, as (field, reason); [] when it can run it.
    A ray:// address is checked by the launcher once it has joined the cluster."""
    if address.startswith("ray://"):
        return []
    status = snapshot(address)
    if "error" in status:
        return [("resources.launcher", f"the Ray cluster (TP_RAY_ADDRESS) cannot be reached: {status['error']}")]
    alive = [n for n in status["nodes"] if n["state"] != "DEAD"]
    return plan_workers(alive, num_nodes=num_nodes, num_devices=num_devices, use_gpu=use_gpu)[1]


if __name__ == "__main__":
    try:
        print(json.dumps(_collect(sys.argv[1])))
    except Exception as exc:  # noqa: BLE001 - reported to the parent as the snapshot's error
        print(
            json.dumps(
                {
                    "address": sys.argv[1],
                    "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:400]}"
                    if str(exc)
                    else type(exc).__name__,
                }
            )
        )

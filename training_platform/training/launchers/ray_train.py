"""The Ray launcher: the ranks as Ray Train workers (`TorchTrainer`) on the cluster of `TP_RAY_ADDRESS`.

Each worker runs the same rank body as under torchrun (`rank_main.run_rank`): Ray Train starts the processes on
the cluster's nodes and joins them in a torch process group (gloo on CPU, nccl on GPUs); our core does the rest.
The run directory is the storage: it must be on a filesystem every node sees (NFS, a shared volume). Each worker
first reads a token the driver wrote into it, so a node that sees another disk fails at once, naming itself.
Ray's own checkpoints are not used (Trainer's checkpoints go to `checkpoints/step_NNNNNN` through the RunWriter);
`ranks/ray/` keeps Ray Train's run state.

Workers get only the environment they need (data dir, offline flags, model roots): never the driver's secrets.
A stop is the STOP file (every node sees the run directory); if the ranks do not stop in time the driver shuts
the trainer down.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import signal
import threading
import time
from typing import Any

from training_platform.core.paths import data_dir
from training_platform.core.settings import ray_worker_env
from training_platform.training.launchers import LaunchOutcome
from training_platform.training.rundir import RunDir, error_file, ranks_dir
from training_platform.training.stop_signal import StopSignal

log = logging.getLogger("training_platform.train")

KILL_AFTER_S = 60.0
STORAGE_TOKEN = "storage_token"


def _rank_entry(config: dict[str, Any]) -> None:
    """Runs in each Ray Train worker (not its main thread)."""
    from pathlib import Path

    from training_platform.training.rank_main import run_rank

    run = RunDir(config["run_dir"])
    token_file = ranks_dir(run) / STORAGE_TOKEN
    try:
        seen = token_file.read_text().strip()
    except OSError:
        seen = None
    if seen != config["token"]:
        import socket

        raise RuntimeError(
            f"the run directory {run.path} is not shared with node {socket.gethostname()} (it does "
            "not see the driver's files there): put TP_DATA_DIR on storage every node mounts"
        )
    code = run_rank(Path(config["run_dir"]), "ray")
    if code != 0:
        rank = int(os.environ.get("RANK", "0"))
        try:
            message = json.loads(error_file(run, rank).read_text())["message"]
        except (OSError, ValueError, KeyError):
            message = "see its log"
        raise RuntimeError(f"rank {rank} failed: {message}")


def _cluster_check(cfg) -> tuple[int, str | None]:
    """CPUs to give each worker, or the reason the cluster (joined) cannot run the job: the preflight rule again,
    for ray:// addresses and for a cluster that changed since."""
    import ray

    from training_platform.training.ray_cluster import plan_workers

    nodes = [
        {"resources": {name: {"total": float(n["Resources"].get(name, 0))} for name in ("CPU", "GPU")}}
        for n in ray.nodes()
        if n.get("Alive")
    ]
    r = cfg.resources
    cpus, problems = plan_workers(nodes, num_nodes=r.num_nodes, num_devices=r.num_devices, use_gpu=r.device == "cuda")
    return cpus, "; ".join(f"{field}: {reason}" for field, reason in problems) or None


def launch(run: RunDir, *, cfg, address: str, stop: StopSignal) -> LaunchOutcome:
    import ray
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    world = cfg.resources.processes
    token = secrets.token_hex(16)
    (ranks_dir(run) / STORAGE_TOKEN).write_text(token)
    env = ray_worker_env("TP_RAY_ADDRESS")  # paths and offline flags only: no tokens, no keys
    env["TP_DATA_DIR"] = str(data_dir())
    log.info("connecting to the Ray cluster at %s", address)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    ray.init(
        address=address,
        runtime_env={"env_vars": env},
        logging_level=logging.WARNING,
        log_to_driver=True,
        configure_logging=False,
    )
    for sig, handler in handlers.items():  # ray.init exits on SIGTERM; ours asks the ranks for an agreed stop
        with contextlib.suppress(ValueError, TypeError):
            signal.signal(sig, handler)
    holder: dict[str, Any] = {}
    try:
        cpus, problem = _cluster_check(cfg)
        if problem:
            return LaunchOutcome(2, None, problem)
        use_gpu = cfg.resources.device == "cuda"
        strategy = "STRICT_SPREAD" if cfg.resources.num_devices == 1 and cfg.resources.num_nodes > 1 else "SPREAD"
        trainer = TorchTrainer(
            _rank_entry,
            train_loop_config={"run_dir": str(run.path), "token": token},
            torch_config=TorchConfig(backend="nccl" if use_gpu else "gloo"),
            scaling_config=ScalingConfig(
                num_workers=world, use_gpu=use_gpu, resources_per_worker={"CPU": cpus}, placement_strategy=strategy
            ),
            run_config=RunConfig(
                name=f"tp-{run.path.name}",
                storage_path=str(ranks_dir(run) / "ray"),
                failure_config=FailureConfig(max_failures=0),
            ),
        )
        log.info("Ray Train: %d workers x %d CPU%s (%s)", world, cpus, ", 1 GPU" if use_gpu else "", strategy)

        def fit() -> None:
            try:
                holder["result"] = trainer.fit()
            except BaseException as exc:  # noqa: BLE001 - reported by the outcome below
                holder["error"] = exc

        thread = threading.Thread(target=fit, name="tp-ray-fit", daemon=True)
        thread.start()
        stop_since: float | None = None
        while thread.is_alive():
            if stop.reason is not None:
                if stop_since is None:
                    log.info("stop requested (%s): asking every rank through the STOP file", stop.reason)
                    stop_since = time.monotonic()
                run.stop_file.touch()
                if time.monotonic() - stop_since > KILL_AFTER_S:
                    log.error("the Ray workers did not stop within %.0f s: shutting them down", KILL_AFTER_S)
                    break
            thread.join(timeout=0.2)
    finally:
        with contextlib.suppress(Exception):
            ray.shutdown()
    error = holder.get("error") or getattr(holder.get("result"), "error", None)
    if "result" in holder and error is None:
        return LaunchOutcome(0)
    return _failure(run, world, error)


def _failure(run: RunDir, world: int, error: BaseException | None) -> LaunchOutcome:
    """The rank to blame: one whose worker process died (it wrote nothing; the others then fail on the broken
    process group, which is not their fault), else the first rank that recorded an error."""
    from ray.exceptions import RayActorError

    failures = getattr(error, "worker_failures", None) or {}
    died = {}
    for rank, exc in failures.items():  # Ray Train's health check wraps the actor's death
        cause = getattr(exc, "health_check_failure", exc)
        if isinstance(cause, RayActorError):
            died[rank] = cause
    if died:
        rank = min(died)
        lines = [line.strip() for line in str(died[rank]).splitlines() if line.strip()]
        why = next((line for line in lines if "SIG" in line or "exit" in line.lower()), lines[0] if lines else "")[:300]
        return LaunchOutcome(1, rank, f"rank {rank} died: {type(died[rank]).__name__}: {why}"[:2000])
    errors = {}
    for rank in range(world):
        with contextlib.suppress(OSError, ValueError):
            errors[rank] = json.loads(error_file(run, rank).read_text())
    if errors:
        rank = min(errors, key=lambda r: errors[r]["ts"])
        e = errors[rank]
        return LaunchOutcome(1, rank, f"rank {rank} failed: {e['type']}: {e['message']}")
    text = str(error).strip().splitlines() if error is not None else []
    detail = next((line for line in text if "rank" in line.lower() or "Error" in line), text[0] if text else "")
    return LaunchOutcome(1, None, f"Ray Train failed: {type(error).__name__ if error else 'stopped'}: {detail}"[:2000])

"""What a run's processes are doing, read from its config and run directory (for the job page and the API).

No process is asked: the launcher's record in the run directory is the source (`ranks/rank_K.error.json` of a rank
that raised, `ranks/result.json` once rank 0 finished, run.json's restarts), combined with the job's status.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from training_platform.training.launchers import resolve

ACTIVE = {"preflight", "running"}


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else default


def distributed_info(config: dict, run_dir: str | None, job_status: str) -> dict[str, Any] | None:
    """{launcher, num_nodes, processes_per_node, world_size, restarts, ranks: [{rank, node, state, error, log}],
    workers: [{actor, name, node_id, node_ip, pid}]} for a training config, None for anything else. `workers` is
    where verl's RL placed its Ray actors (run.json, engines/verl/rl.py): the torch ranks are `WorkerDict`."""
    resources = config.get("resources") if isinstance(config, dict) else None
    if not isinstance(config, dict) or "algorithm" not in config:
        return None
    resources = resources if isinstance(resources, dict) else {}
    nodes, per_node = _int(resources.get("num_nodes"), 1), _int(resources.get("num_devices"), 1)
    launcher = resolve(str(resources.get("launcher", "auto")), num_nodes=nodes, num_devices=per_node)
    world = nodes * per_node
    run = Path(run_dir) if run_dir else None
    ranks_dir = run / "ranks" if run else None
    restarts, workers = 0, []
    if run is not None:
        try:
            info = json.loads((run / "run.json").read_text())
            restarts = int(info.get("restarts", 0))
            workers = _placements(info.get("workers"))
        except (OSError, ValueError, TypeError, AttributeError):
            restarts = 0
    finished = ranks_dir is not None and (ranks_dir / "result.json").is_file()
    ranks = []
    for rank in range(world):
        error = None
        if ranks_dir is not None:
            try:
                error = str(json.loads((ranks_dir / f"rank_{rank}.error.json").read_text()).get("message", ""))
            except (OSError, ValueError):
                error = None
        if error is not None:
            state = "failed"
        elif job_status == "queued" or run is None:
            state = "pending"
        elif job_status in ACTIVE and not finished:
            state = "running"
        elif job_status == "succeeded" or finished:
            state = "finished"
        else:
            state = job_status  # failed / cancelled with no error of its own: it went down with the run
        log = "train.log" if rank == 0 or launcher == "local" else f"ranks/rank_{rank}.log"
        ranks.append({"rank": rank, "node": rank // per_node, "state": state, "error": error, "log": log})
    return {
        "launcher": launcher,
        "num_nodes": nodes,
        "processes_per_node": per_node,
        "world_size": world,
        "restarts": restarts,
        "ranks": ranks,
        "workers": workers,
    }


PLACEMENT_KEYS = ("actor", "name", "node_id", "node_ip", "pid")


def _placements(raw: Any) -> list[dict[str, Any]]:
    """run.json's `workers` (verl RL: where each of verl's Ray actors ran), kept to its known keys."""
    if not isinstance(raw, list):
        return []
    return [{k: w.get(k) for k in PLACEMENT_KEYS} for w in raw[:256] if isinstance(w, dict)]

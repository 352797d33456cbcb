"""What the runs table shows of each job's results: its last loss and reward (metric points) and its best
checkpoint evaluation, for a whole page of jobs in a bounded number of queries (one for the metric points of every
job of the page, two for the evaluations of the jobs without a best checkpoint), whatever the page's size.

The metric names are the ones the training core logs into metric_points: `loss` (TRL's loss, verl's renamed
`actor/pg_loss` / `train/loss`, PPO's recorded objective) and `reward` (GRPO, RLOO, REINFORCE++ on TRL and verl),
else PPO's `objective/rlhf_reward`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from sqlmodel import Session

from training_platform.db import runs_table
from training_platform.services import evaluations

LOSS_METRIC = "loss"
REWARD_METRICS = ("reward", "objective/rlhf_reward")  # the first one a job logged


def empty_summary() -> dict[str, Any]:
    """A job with nothing logged or evaluated yet (a new job)."""
    return {"last_loss": None, "best_eval": None, "last_reward": None, "last_step": None}


def summaries(session: Session, jobs: Sequence[tuple[int, dict[str, Any] | None]]) -> dict[int, dict[str, Any]]:
    """{job id: summary} for (job id, the job's best_checkpoint) pairs: {"last_loss", "best_eval": {"metric",
    "value", "step"} | None, "last_reward", "last_step"} (JobSummary in the API's schemas)."""
    if not jobs:
        return {}
    ids = [job_id for job_id, _ in jobs]
    points = runs_table.last_points(session, ids, (LOSS_METRIC, *REWARD_METRICS))
    kept = {job_id: _from_best_checkpoint(best) for job_id, best in jobs}
    results = evaluations.checkpoint_results_of(session, [job_id for job_id in ids if kept[job_id] is None])
    out = {}
    for job_id in ids:
        found = points.get(job_id, {})
        loss = found.get(LOSS_METRIC)
        reward = next((found[name] for name in REWARD_METRICS if name in found), None)
        steps = [point[0] for point in (loss, reward) if point is not None]
        out[job_id] = {
            "last_loss": _finite(loss[1]) if loss else None,
            "best_eval": kept[job_id] or _best_evaluated(results.get(job_id) or {}),
            "last_reward": _finite(reward[1]) if reward else None,
            "last_step": max(steps) if steps else None,
        }
    return out


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _from_best_checkpoint(best: dict[str, Any] | None) -> dict[str, Any] | None:
    """The job's best checkpoint (services.evaluations.update_best_checkpoint) as a best_eval."""
    if not isinstance(best, dict):
        return None
    metric, value, step = best.get("metric"), _finite(best.get("value")), best.get("step")
    if not isinstance(metric, str) or value is None or not isinstance(step, int) or isinstance(step, bool):
        return None
    return {"metric": metric, "value": value, "step": step}


def _best_evaluated(results: dict[int, dict[str, Any]]) -> dict[str, Any] | None:
    """Without a best checkpoint: the best value (higher is better, the earliest step on a tie, as
    best_checkpoint judges) of the alphabetically first metric among the job's evaluated checkpoints."""
    names = sorted({name for result in results.values() for name in result["metrics"]})
    for metric in names:
        scored = [
            (value, step)
            for step, result in results.items()
            if (value := _finite(result["metrics"].get(metric))) is not None
        ]
        if scored:
            value, step = max(scored, key=lambda s: (s[0], -s[1]))
            return {"metric": metric, "value": value, "step": step}
    return None

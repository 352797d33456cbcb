"""RL rollouts kept in the run directory: a sample of what the policy generated at each logging step.

`rollouts.jsonl` holds one JSON object per kept rollout, in step order:

    {"step": 5, "prompt": "...", "completion": "...", "rewards": {"math_answer": 1.0, "length_penalty": -0.25},
     "reward": 0.975, "advantage": 0.41}

- `rewards`: each reward function's own value (null where the function returned None); `{}` when the engine does
  not report per-function values (verl's v1 trainer dumps only the total);
- `reward`: the total the trainer optimised (the weighted sum of `rewards`, or the reward model's score);
- `advantage`: the rollout's advantage when the trainer computed one per completion (GRPO, RLOO), else null.

An agent episode (`agent:`) adds `tool_calls` and `tool_errors` (counts) and `turns`: the conversation after the
prompt, each assistant message (`content`, its `tool_calls` as `{name, arguments}`) and each tool's result
(`{"role": "tool", "name", "arguments", "content", "ok", "latency_s", "reward"}`), in order. `step` stays first
(the API reads it from the line's prefix).

Engine-neutral (no torch): an engine hands every rollout of a logging step to `RolloutWriter.write_step`; the
writer keeps `training.rollout_samples_per_step` of them (a seeded random sample, in their original order), writes
only on global rank 0 (every rank may call it) and stops at `training.rollouts_max_mb`, saying so once, loudly, in
the log and in run.json (`rollouts_capped_at_step`). On resume the runner drops rows after the checkpoint
(`RunDir.truncate_rollouts_after`), as it does for metrics.
"""

from __future__ import annotations

import json
import logging
import math
import random
from collections.abc import Iterable, Mapping
from typing import Any

from training_platform.training.rundir import RunDir

log = logging.getLogger("training_platform.train")


def _number(value: Any) -> float | None:
    """A finite float, or None (JSON has no NaN; TRL marks a reward function's None as NaN)."""
    if value is None:
        return None
    if hasattr(value, "item"):
        value = value.item()
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)  # a conversational prompt: its messages


def _count(value: Any) -> int | None:
    number = _number(value)
    return None if number is None or number < 0 else int(number)


def rollout_row(
    step: int,
    prompt: Any,
    completion: Any,
    rewards: Mapping[str, Any] | None,
    reward: Any,
    advantage: Any = None,
    *,
    turns: list[Any] | None = None,
    tool_calls: Any = None,
    tool_errors: Any = None,
) -> dict[str, Any]:
    """One row of rollouts.jsonl, normalised (strings, finite floats or null); an agent episode's `turns` and
    counts only when given."""
    row: dict[str, Any] = {
        "step": int(step),
        "prompt": _text(prompt),
        "completion": _text(completion),
        "rewards": {str(k): _number(v) for k, v in (rewards or {}).items()},
        "reward": _number(reward),
        "advantage": _number(advantage),
    }
    if turns is not None:
        row["tool_calls"] = _count(tool_calls)
        row["tool_errors"] = _count(tool_errors)
        row["turns"] = [t for t in turns if isinstance(t, dict)]
    return row


class RolloutWriter:
    """Appends a sample of each logging step's rollouts to `<run>/rollouts.jsonl` (rank 0 only, size-capped)."""

    def __init__(self, run: RunDir, *, rank: int = 0, samples_per_step: int, max_mb: float, seed: int = 0):
        if samples_per_step < 0:
            raise ValueError(f"samples_per_step must be >= 0, got {samples_per_step}")
        if max_mb <= 0:
            raise ValueError(f"max_mb must be > 0, got {max_mb}")
        self.run = run
        self.rank = rank
        self.samples_per_step = samples_per_step
        self.max_bytes = int(max_mb * 2**20)
        self.seed = seed
        self.capped = False
        self.last_step: int | None = None

    @classmethod
    def for_job(cls, cfg, run: RunDir, *, rank: int = 0) -> RolloutWriter:
        t = cfg.training
        return cls(run, rank=rank, samples_per_step=t.rollout_samples_per_step, max_mb=t.rollouts_max_mb, seed=t.seed)

    @property
    def path(self):
        return self.run.rollouts_file

    @property
    def enabled(self) -> bool:
        return self.rank == 0 and self.samples_per_step > 0 and not self.capped

    def sample(self, step: int, count: int) -> list[int]:
        """Indices of the rollouts kept at `step` out of `count`: seeded by (seed, step), so a resumed run keeps the
        same ones; in their original order."""
        if count <= self.samples_per_step:
            return list(range(count))
        return sorted(random.Random(f"{self.seed}:{step}").sample(range(count), self.samples_per_step))

    def write_step(self, step: int, rows: Iterable[Mapping[str, Any]]) -> int:
        """Keep a sample of one step's rollouts (rows as made by `rollout_row`). Returns how many were written."""
        if not self.enabled:
            return 0
        rows = list(rows)
        if not rows:
            return 0
        lines = [json.dumps(rows[i], ensure_ascii=False) + "\n" for i in self.sample(step, len(rows))]
        data = "".join(lines).encode("utf-8")
        size = self.path.stat().st_size if self.path.exists() else 0
        if size + len(data) > self.max_bytes:
            self.capped = True
            mb = self.max_bytes / 2**20
            log.error(
                "ROLLOUTS CAPPED: %s reached training.rollouts_max_mb (%g MB) at step %d; no more rollouts are "
                "kept for this run (training goes on; raise training.rollouts_max_mb or lower "
                "training.rollout_samples_per_step to keep more)",
                self.path.name,
                mb,
                step,
            )
            self.run.update_run_info(rollouts_capped_at_step=step)
            return 0
        with self.path.open("ab") as f:
            f.write(data)
        self.last_step = step
        return len(lines)

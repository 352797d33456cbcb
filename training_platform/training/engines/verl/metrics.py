"""verl's metric names -> ours (the rest keep verl's name), so charts and comparisons read the same keys for every
engine. SFT rows come from our loop; RL rows from verl's file logger (`{"step": N, "data": {...}}`)."""

from __future__ import annotations

import math
import time
from typing import Any

# verl name -> ours (docs/engines.md)
NAMES = {
    "loss": "loss",
    "train/loss": "loss",
    "grad_norm": "grad_norm",
    "train/grad_norm": "grad_norm",
    "lr": "lr",
    "train/lr": "lr",
    "actor/lr": "lr",
    "actor/pg_loss": "loss",
    "actor/grad_norm": "grad_norm",
    "actor/entropy": "entropy",
    "actor/kl_loss": "kl",
    "actor/reward_kl_penalty": "kl",  # KL in the reward (RLOO, PPO)
    "actor/ppo_kl": "ppo_kl",
    "actor/pg_clipfrac": "clip_fraction",
    "critic/score/mean": "reward",
    "critic/rewards/mean": "reward",
    "critic/score/std": "reward_std",
    "response_length/mean": "completions/mean_length",
    "response_length/max": "completions/max_length",
    "response_length/clip_ratio": "completions/clipped_ratio",
    "critic/vf_loss": "value_loss",
    "critic/advantages/mean": "advantage_mean",
    "perf/throughput": "tokens_per_sec",
    "timing_s/step": "sec_per_step",
}


def _scalar(value: Any) -> float | int | None:
    if hasattr(value, "item") and getattr(value, "numel", lambda: 1)() == 1:
        value = value.item()
    if isinstance(value, list | tuple):
        values = [x for x in (_scalar(v) for v in value) if x is not None]
        return sum(values) / len(values) if values else None
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float):
        return value if not isinstance(value, float) or math.isfinite(value) else None
    return None


def rename(metrics: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in metrics.items():
        number = _scalar(value)
        if number is None and value is not None:
            continue
        out[NAMES.get(key, key)] = number
    return out


def sft_record(
    step: int, epoch: int, metrics: dict[str, Any], *, tokens: int, seconds: float, steps: int
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "step": step,
        "epoch": epoch,
        "ts": round(time.time(), 3),
        "sec_per_step": round(seconds / steps, 6) if steps else None,
        "tokens_per_sec": round(tokens / (seconds / steps), 2) if seconds > 0 else None,
        "num_tokens": tokens,
    }
    record.update(rename(dict(metrics)))
    return record

"""Reward weights: the rule applied to `rewards[*].weight` of a job (training.reward_weights).

Modes:
- `normalise` (default): weights >= 0 (the schema refuses negatives), not all 0; when they do not sum to 1 they are
  divided by their sum, with a warning that says so.
- `exact`: the weights must sum to 1 (within 1e-6); nothing is rescaled.
- `strict`: as `exact`, and with several rewards no single one may carry more than 0.5 (a lone reward carries 1).

`check_reward_weights` is pure (no config import): it returns (errors, warnings, normalised weights), errors as
(field path, reason) naming `rewards[i].weight` or `rewards`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

WeightMode = Literal["normalise", "strict", "exact"]
SUM_TOLERANCE = 1e-6
STRICT_MAX_WEIGHT = 0.5


def _weight(reward: Any) -> float:
    return float(reward["weight"] if isinstance(reward, dict) else reward.weight)


def _name(reward: Any) -> str:
    return str(reward["name"] if isinstance(reward, dict) else reward.name)


def check_reward_weights(
    rewards: Sequence[Any], *, mode: WeightMode = "normalise"
) -> tuple[list[tuple[str, str]], list[str], list[float]]:
    """`rewards`: RewardSection objects or dicts with `name` and `weight`. Returns (errors, warnings, normalised)
    where `normalised` sums to 1 (empty when there are errors or no rewards)."""
    if mode not in ("normalise", "strict", "exact"):
        raise ValueError(f"unknown reward weight mode {mode!r}")
    errors: list[tuple[str, str]] = []
    warnings: list[str] = []
    if not rewards:
        return errors, warnings, []
    weights = [_weight(r) for r in rewards]
    for i, w in enumerate(weights):
        if not math.isfinite(w) or w < 0:
            errors.append((f"rewards[{i}].weight", f"must be a finite number >= 0, got {w!r}"))
    if errors:
        return errors, warnings, []
    total = sum(weights)
    if total <= 0:
        return [("rewards", "the reward weights must not all be 0")], warnings, []
    if mode in ("strict", "exact") and abs(total - 1.0) > SUM_TOLERANCE:
        errors.append(
            (
                "rewards",
                f"training.reward_weights {mode}: the weights must sum to 1 (within "
                f"{SUM_TOLERANCE:g}), got {total:.6g} ({', '.join(f'{w:g}' for w in weights)})",
            )
        )
    if mode == "strict" and len(rewards) > 1:  # one reward carries everything by definition
        for i, w in enumerate(weights):
            if w > STRICT_MAX_WEIGHT + SUM_TOLERANCE:
                errors.append(
                    (
                        f"rewards[{i}].weight",
                        f"training.reward_weights strict: no single reward may carry "
                        f"more than {STRICT_MAX_WEIGHT} ({_name(rewards[i])} has "
                        f"{w:g})",
                    )
                )
    if errors:
        return errors, warnings, []
    normalised = [w / total for w in weights]
    if mode == "normalise" and abs(total - 1.0) > SUM_TOLERANCE:
        warnings.append(
            "rewards: the weights sum to "
            f"{total:.6g}, not 1; they are normalised to "
            + ", ".join(f"{_name(r)}={w:.4g}" for r, w in zip(rewards, normalised, strict=True))
        )
    return errors, warnings, normalised

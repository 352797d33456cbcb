"""Gate check `difficulty_mix`: shares of the audit report's difficulty buckets. The report it goes into:
data/gate/base.py."""

from __future__ import annotations

from pydantic import Field

from training_platform.data.gate.base import (
    CheckParams,
    GateContext,
    Outcome,
    at_least,
    at_most,
    register_check,
)


class DifficultyParams(CheckParams):
    min_hard: float | None = Field(None, ge=0, le=1, description="Minimum share of hard rows.")
    max_easy: float | None = Field(None, ge=0, le=1, description="Maximum share of easy rows.")


@register_check(
    "difficulty_mix",
    DifficultyParams,
    "Shares of the audit report's difficulty buckets (easy < 1/3 <= medium < 2/3 <= hard).",
)
def check_difficulty_mix(ctx: GateContext, p: DifficultyParams) -> Outcome:
    import numpy as np

    from training_platform.data.report import (
        BUCKETS,
        DIFFICULTY_FEATURES,
        bucket_of,
        difficulty_features,
        difficulty_scores,
    )

    parts = ([f"hard >= {p.min_hard}"] if p.min_hard is not None else []) + (
        [f"easy <= {p.max_easy}"] if p.max_easy is not None else []
    )
    threshold = ", ".join(parts) or "-"
    if not parts:
        return Outcome("skipped", None, threshold, "no min_hard or max_easy set")
    features: dict[str, list[int]] = {name: [] for name in DIFFICULTY_FEATURES}
    for row in ctx.rows():
        for name, value in difficulty_features(row, ctx.fmt).items():
            features[name].append(value)
    n = len(features[DIFFICULTY_FEATURES[0]])
    if not n:
        return Outcome("skipped", None, threshold, "no rows")
    buckets = bucket_of(difficulty_scores({k: np.asarray(v, dtype=np.float64) for k, v in features.items()}))
    shares = {name: round(float((buckets == i).sum()) / n, 6) for i, name in enumerate(BUCKETS)}
    problems = []
    if p.min_hard is not None and not at_least(shares["hard"], p.min_hard):
        problems.append(f"hard {shares['hard']} < {p.min_hard}")
    if p.max_easy is not None and not at_most(shares["easy"], p.max_easy):
        problems.append(f"easy {shares['easy']} > {p.max_easy}")
    return Outcome(
        "fail" if problems else "pass",
        shares,
        threshold,
        "; ".join(problems) or f"easy {shares['easy']}, medium {shares['medium']}, hard {shares['hard']}",
    )

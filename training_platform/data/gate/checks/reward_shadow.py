"""Gate check `reward_shadow`: a training job's reward set approved by a passing shadow report (not about the data).
The report it goes into: data/gate/base.py."""

from __future__ import annotations

from pydantic import Field

from training_platform.data.gate.base import (
    CheckParams,
    GateContext,
    Outcome,
    register_check,
)


class RewardShadowParams(CheckParams):
    min_spearman: float = Field(
        0.8,
        ge=-1,
        le=1,
        description=("A shadow report approves a reward set when its verdict is pass and its Spearman is >= this."),
    )


REWARD_SHADOW_CHECK = "reward_shadow"


@register_check(
    REWARD_SHADOW_CHECK,
    RewardShadowParams,
    "A training job's reward set must be the `new` scorer of a passing reward shadow report "
    "(checked at the job's preflight; skipped on a dataset).",
)
def check_reward_shadow(ctx: GateContext, p: RewardShadowParams) -> Outcome:
    # About the job's rewards, not the data: training/gate_check.py and the worker's preflight enforce it.
    return Outcome(
        "skipped",
        None,
        f"spearman >= {p.min_spearman}",
        "applies to a training job's rewards: checked at its preflight against passing shadow reports",
    )

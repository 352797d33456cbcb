"""Group Relative Policy Optimization; GSPO = importance_sampling_level 'sequence'."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from training_platform.training.algorithms.base import AlgorithmSpec, GenerationParams


class Params(GenerationParams):
    name: Literal["grpo"]
    loss_type: Literal["grpo", "dr_grpo", "dapo", "bnpo"] = "dapo"
    importance_sampling_level: Literal["token", "sequence"] = Field(
        "token", description="'sequence' gives GSPO (sequence-level importance ratios)."
    )
    scale_rewards: Literal["group", "batch", "none"] = Field(
        "group", description="Divide advantages by the reward std of the group, the batch, or not at all (Dr. GRPO)."
    )


ALGORITHM = AlgorithmSpec(
    name="grpo",
    params=Params,
    data_kind="rl",
    uses_reward_functions=True,
    description="GRPO (and Dr. GRPO, DAPO, BNPO losses; GSPO via sequence-level importance sampling).",
    metrics=("reward", "reward_std", "rewards/<function>/mean", "completions/mean_length", "kl"),
)

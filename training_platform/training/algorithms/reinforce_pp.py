"""REINFORCE++: REINFORCE with advantages normalised over the whole batch (no critic, no groups needed) and a
token-level KL penalty to the reference model; `baseline: true` subtracts each prompt's mean reward first
(REINFORCE++-baseline, for several completions per prompt)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from training_platform.training.algorithms.base import AlgorithmSpec, CheckContext, GenerationParams


class Params(GenerationParams):
    name: Literal["reinforce_pp"]
    num_generations: int = Field(1, ge=1, le=1024, description="Completions per prompt (>= 2 with baseline).")
    baseline: bool = Field(False, description="Subtract the prompt's mean reward (REINFORCE++-baseline).")
    beta: float = Field(0.001, ge=0, le=1000, description="KL coefficient (loss against the reference model).")
    kl_estimator: Literal["k1", "k2", "k3", "mse", "low_var_kl"] = Field(
        "mse", description="KL estimator of the penalty (verl's kl_loss_type)."
    )

    def check(self, ctx: CheckContext) -> list[tuple[str, str]]:
        errors = super().check(ctx)
        if self.baseline and self.num_generations < 2:
            errors.append(
                (
                    "algorithm.num_generations",
                    "the baseline is the mean over a prompt's completions: needs num_generations >= 2",
                )
            )
        return errors


ALGORITHM = AlgorithmSpec(
    name="reinforce_pp",
    params=Params,
    data_kind="rl",
    uses_reward_functions=True,
    description="REINFORCE++ (batch-normalised advantages, KL to the reference; -baseline variant per prompt).",
    metrics=("reward", "rewards/<function>/mean", "completions/mean_length", "kl"),
)

"""REINFORCE Leave-One-Out."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from training_platform.training.algorithms.base import AlgorithmSpec, GenerationParams


class Params(GenerationParams):
    name: Literal["rloo"]
    num_generations: int = Field(4, ge=2, le=1024, description="Completions per prompt; the baseline leaves one out.")
    beta: float = Field(0.05, ge=0, le=1000, description="KL coefficient (in the reward).")
    normalize_advantages: bool = False
    reward_clip_range: list[float] | None = Field(None, min_length=2, max_length=2, description="[min, max]")


ALGORITHM = AlgorithmSpec(
    name="rloo",
    params=Params,
    data_kind="rl",
    uses_reward_functions=True,
    description="RLOO: REINFORCE with a leave-one-out baseline over each prompt's completions.",
    metrics=("reward", "reward_std", "rewards/<function>/mean", "completions/mean_length", "kl"),
)

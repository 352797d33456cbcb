"""Reward-model training: a sequence-classification head scores chosen above rejected."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from training_platform.training.algorithms.base import AlgorithmParams, AlgorithmSpec


class Params(AlgorithmParams):
    name: Literal["reward"]
    center_rewards_coefficient: float | None = Field(
        None, ge=0, description="Push rewards towards zero mean (0.01 in the paper that introduced it)."
    )


ALGORITHM = AlgorithmSpec(
    name="reward",
    params=Params,
    data_kind="preference",
    model_kind="sequence_classification",
    description="Train a reward model (Bradley-Terry) on chosen/rejected pairs; PPO can use it.",
    metrics=("accuracy", "margin"),
)

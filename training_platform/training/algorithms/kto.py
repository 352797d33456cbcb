"""Kahneman-Tversky Optimization: unpaired desirable/undesirable completions."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from training_platform.training.algorithms.base import AlgorithmParams, AlgorithmSpec


class Params(AlgorithmParams):
    name: Literal["kto"]
    beta: float = Field(0.1, gt=0, le=100)
    loss_type: Literal["kto", "apo_zero_unpaired"] = "kto"
    desirable_weight: float = Field(1.0, gt=0, le=100, description="Up-weight the rarer label class.")
    undesirable_weight: float = Field(1.0, gt=0, le=100)


ALGORITHM = AlgorithmSpec(
    name="kto",
    params=Params,
    data_kind="kto",
    description="KTO on completions labelled desirable (true) or undesirable (false).",
    metrics=("kl", "rewards/chosen", "rewards/rejected"),
)

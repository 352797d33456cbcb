"""SimPO (CPO with the simpo loss): length-normalised, reference-free preference optimisation."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from training_platform.training.algorithms.base import AlgorithmParams, AlgorithmSpec


class Params(AlgorithmParams):
    name: Literal["simpo"]
    beta: float = Field(2.0, gt=0, le=100, description="Reward scale (SimPO paper: 2.0-2.5).")
    simpo_gamma: float = Field(0.5, ge=0, le=10, description="Target reward margin.")
    cpo_alpha: float = Field(0.0, ge=0, le=10, description="Weight of the NLL term; 0 = pure SimPO, >0 = CPO-SimPO.")
    label_smoothing: float = Field(0.0, ge=0, lt=0.5)
    max_completion_length: int | None = Field(None, ge=1, le=1_048_576)


ALGORITHM = AlgorithmSpec(
    name="simpo",
    params=Params,
    data_kind="preference",
    description="SimPO: reference-free preference optimisation with a length-normalised reward and margin.",
    metrics=("rewards/margins", "rewards/accuracies"),
)

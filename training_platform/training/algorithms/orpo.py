"""Odds Ratio Preference Optimization: SFT + preference in one step, no reference model."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from training_platform.training.algorithms.base import AlgorithmParams, AlgorithmSpec


class Params(AlgorithmParams):
    name: Literal["orpo"]
    beta: float = Field(0.1, gt=0, le=100, description="Weight of the odds-ratio term (lambda in the paper).")
    max_completion_length: int | None = Field(None, ge=1, le=1_048_576)


ALGORITHM = AlgorithmSpec(
    name="orpo",
    params=Params,
    data_kind="preference",
    description="ORPO: monolithic preference optimisation without a reference model.",
    metrics=("log_odds_ratio", "log_odds_chosen", "nll_loss"),
)

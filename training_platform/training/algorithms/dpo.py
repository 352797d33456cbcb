"""Direct Preference Optimization, incl. IPO and the other pairwise losses."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from training_platform.training.algorithms.base import AlgorithmParams, AlgorithmSpec, CheckContext

DPOLoss = Literal[
    "sigmoid",
    "hinge",
    "ipo",
    "exo_pair",
    "nca_pair",
    "robust",
    "bco_pair",
    "sppo_hard",
    "aot",
    "aot_unpaired",
    "apo_zero",
    "apo_down",
    "discopop",
    "sft",
    "sigmoid_norm",
]


def _sigmoid() -> list[DPOLoss]:
    return ["sigmoid"]


class Params(AlgorithmParams):
    name: Literal["dpo"]
    beta: float = Field(0.1, gt=0, le=100, description="Deviation from the reference (IPO: regularisation tau).")
    loss_type: list[DPOLoss] = Field(
        default_factory=_sigmoid,
        min_length=1,
        description="One loss, or several combined with loss_weights (e.g. MPO).",
    )
    loss_weights: list[float] | None = None
    label_smoothing: float = Field(0.0, ge=0, lt=0.5, description="Robust/cDPO label noise.")

    def check(self, ctx: CheckContext) -> list[tuple[str, str]]:
        errors = []
        if self.loss_weights is not None and len(self.loss_weights) != len(self.loss_type):
            errors.append(
                (
                    "algorithm.loss_weights",
                    f"needs one weight per loss_type ({len(self.loss_type)}), got {len(self.loss_weights)}",
                )
            )
        if self.label_smoothing and not set(self.loss_type) & {"sigmoid", "robust"}:
            errors.append(("algorithm.label_smoothing", "only applies to the sigmoid and robust losses"))
        return errors


ALGORITHM = AlgorithmSpec(
    name="dpo",
    params=Params,
    data_kind="preference",
    description="Direct Preference Optimization on chosen/rejected pairs (sigmoid, ipo, hinge, ...).",
    metrics=(
        "rewards/chosen",
        "rewards/rejected",
        "rewards/accuracies",
        "rewards/margins",
        "logps/chosen",
        "logps/rejected",
    ),
)

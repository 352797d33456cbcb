"""Kahneman-Tversky Optimization (TRL KTOTrainer): unpaired desirable/undesirable completions."""

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


def build_trainer(ctx):
    from trl import KTOConfig, KTOTrainer

    p: Params = ctx.cfg.algorithm
    args = KTOConfig(
        **ctx.common_args, max_length=ctx.cfg.data.max_length, beta=p.beta, loss_type=p.loss_type,
        desirable_weight=p.desirable_weight, undesirable_weight=p.undesirable_weight,
    )
    return KTOTrainer(
        model=ctx.model, args=args, train_dataset=ctx.train_dataset, eval_dataset=ctx.eval_dataset,
        processing_class=ctx.tokenizer, callbacks=ctx.callbacks, peft_config=ctx.peft_config,
    )


ALGORITHM = AlgorithmSpec(
    name="kto", params=Params, data_kind="kto", build_trainer=build_trainer,
    description="KTO on completions labelled desirable (true) or undesirable (false).",
)

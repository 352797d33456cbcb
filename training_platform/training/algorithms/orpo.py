"""Odds Ratio Preference Optimization (trl.experimental.orpo): SFT + preference in one step, no reference."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from training_platform.training.algorithms.base import AlgorithmParams, AlgorithmSpec


class Params(AlgorithmParams):
    name: Literal["orpo"]
    beta: float = Field(0.1, gt=0, le=100, description="Weight of the odds-ratio term (lambda in the paper).")
    max_completion_length: int | None = Field(None, ge=1, le=1_048_576)


def build_trainer(ctx):
    from trl.experimental.orpo import ORPOConfig, ORPOTrainer

    p: Params = ctx.cfg.algorithm
    args = ORPOConfig(
        **ctx.common_args, max_length=ctx.cfg.data.max_length, beta=p.beta,
        max_completion_length=p.max_completion_length,
    )
    return ORPOTrainer(
        model=ctx.model, args=args, train_dataset=ctx.train_dataset, eval_dataset=ctx.eval_dataset,
        processing_class=ctx.tokenizer, callbacks=ctx.callbacks, peft_config=ctx.peft_config,
    )


ALGORITHM = AlgorithmSpec(
    name="orpo", params=Params, data_kind="preference", build_trainer=build_trainer,
    description="ORPO: monolithic preference optimisation without a reference model.",
)

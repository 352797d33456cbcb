"""SimPO (trl.experimental.cpo CPOTrainer with loss_type='simpo'): length-normalised, reference-free."""

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


def build_trainer(ctx):
    from trl.experimental.cpo import CPOConfig, CPOTrainer

    p: Params = ctx.cfg.algorithm
    args = CPOConfig(
        **ctx.common_args, max_length=ctx.cfg.data.max_length, loss_type="simpo", beta=p.beta,
        simpo_gamma=p.simpo_gamma, cpo_alpha=p.cpo_alpha, label_smoothing=p.label_smoothing,
        max_completion_length=p.max_completion_length,
    )
    return CPOTrainer(
        model=ctx.model, args=args, train_dataset=ctx.train_dataset, eval_dataset=ctx.eval_dataset,
        processing_class=ctx.tokenizer, callbacks=ctx.callbacks, peft_config=ctx.peft_config,
    )


ALGORITHM = AlgorithmSpec(
    name="simpo", params=Params, data_kind="preference", build_trainer=build_trainer,
    description="SimPO: reference-free preference optimisation with a length-normalised reward and margin.",
)

"""Reward-model training (TRL RewardTrainer): a sequence-classification head scores chosen above rejected."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from training_platform.training.algorithms.base import AlgorithmParams, AlgorithmSpec


class Params(AlgorithmParams):
    name: Literal["reward"]
    center_rewards_coefficient: float | None = Field(
        None, ge=0, description="Push rewards towards zero mean (0.01 in the paper that introduced it)."
    )


def build_trainer(ctx):
    from trl import RewardConfig, RewardTrainer

    p: Params = ctx.cfg.algorithm
    args = RewardConfig(
        **ctx.common_args, max_length=ctx.cfg.data.max_length,
        center_rewards_coefficient=p.center_rewards_coefficient,
    )
    return RewardTrainer(
        model=ctx.model, args=args, train_dataset=ctx.train_dataset, eval_dataset=ctx.eval_dataset,
        processing_class=ctx.tokenizer, callbacks=ctx.callbacks, peft_config=ctx.peft_config,
    )


ALGORITHM = AlgorithmSpec(
    name="reward", params=Params, data_kind="preference", build_trainer=build_trainer,
    model_kind="sequence_classification",
    description="Train a reward model (Bradley-Terry) on chosen/rejected pairs; PPO can use it.",
)

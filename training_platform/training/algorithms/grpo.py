"""Group Relative Policy Optimization (TRL GRPOTrainer); GSPO = importance_sampling_level 'sequence'."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from training_platform.training.algorithms.base import AlgorithmSpec, GenerationParams


class Params(GenerationParams):
    name: Literal["grpo"]
    loss_type: Literal["grpo", "dr_grpo", "dapo", "bnpo"] = "dapo"
    importance_sampling_level: Literal["token", "sequence"] = Field(
        "token", description="'sequence' gives GSPO (sequence-level importance ratios)."
    )
    scale_rewards: Literal["group", "batch", "none"] = Field(
        "group", description="Divide advantages by the reward std of the group, the batch, or not at all (Dr. GRPO)."
    )


def build_trainer(ctx):
    from trl import GRPOConfig, GRPOTrainer

    p: Params = ctx.cfg.algorithm
    args = GRPOConfig(
        **ctx.common_args, **p.trl_generation_kwargs(), loss_type=p.loss_type,
        importance_sampling_level=p.importance_sampling_level, scale_rewards=p.scale_rewards,
        reward_weights=ctx.reward_weights,
    )
    return GRPOTrainer(
        model=ctx.model, reward_funcs=ctx.reward_funcs, args=args, train_dataset=ctx.train_dataset,
        eval_dataset=ctx.eval_dataset, processing_class=ctx.tokenizer, callbacks=ctx.callbacks,
        peft_config=ctx.peft_config,
    )


ALGORITHM = AlgorithmSpec(
    name="grpo", params=Params, data_kind="rl", build_trainer=build_trainer, uses_reward_functions=True,
    description="GRPO (and Dr. GRPO, DAPO, BNPO losses; GSPO via sequence-level importance sampling).",
)

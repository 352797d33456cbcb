"""REINFORCE Leave-One-Out (TRL RLOOTrainer)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from training_platform.training.algorithms.base import AlgorithmSpec, GenerationParams


class Params(GenerationParams):
    name: Literal["rloo"]
    num_generations: int = Field(4, ge=2, le=1024, description="Completions per prompt; the baseline leaves one out.")
    beta: float = Field(0.05, ge=0, le=1000, description="KL coefficient (in the reward).")
    normalize_advantages: bool = False
    reward_clip_range: list[float] | None = Field(None, min_length=2, max_length=2, description="[min, max]")


def build_trainer(ctx):
    from trl import RLOOConfig, RLOOTrainer

    p: Params = ctx.cfg.algorithm
    args = RLOOConfig(
        **ctx.common_args, **p.trl_generation_kwargs(), normalize_advantages=p.normalize_advantages,
        reward_clip_range=tuple(p.reward_clip_range) if p.reward_clip_range else None,
        reward_weights=ctx.reward_weights,
    )
    return RLOOTrainer(
        model=ctx.model, reward_funcs=ctx.reward_funcs, args=args, train_dataset=ctx.train_dataset,
        eval_dataset=ctx.eval_dataset, processing_class=ctx.tokenizer, callbacks=ctx.callbacks,
        peft_config=ctx.peft_config,
    )


ALGORITHM = AlgorithmSpec(
    name="rloo", params=Params, data_kind="rl", build_trainer=build_trainer, uses_reward_functions=True,
    description="RLOO: REINFORCE with a leave-one-out baseline over each prompt's completions.",
)

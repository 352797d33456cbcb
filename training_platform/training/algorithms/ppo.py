"""PPO with a learned reward model and value model (GAE).

Completions are scored by a sequence-classification reward model (no python reward functions); the value model
starts from `value_model_path` (default: the reward model).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from training_platform.core.userpath import UserDir
from training_platform.training.algorithms.base import AlgorithmParams, AlgorithmSpec, CheckContext


class Params(AlgorithmParams):
    name: Literal["ppo"]
    reward_model_path: UserDir | None = Field(
        None,
        min_length=1,
        description="Sequence-classification reward model (num_labels=1). Required by engine trl; with engine verl, "
        "omit it to score with the job's reward functions.",
    )
    value_model_path: UserDir | None = Field(None, description="Initial value model; defaults to reward_model_path.")
    total_episodes: int | None = Field(
        None, ge=1, le=1_000_000_000, description="Prompts to roll out; default from steps/epochs."
    )
    response_length: int = Field(32, ge=1, le=32768, description="Max new tokens per response.")
    temperature: float = Field(0.7, gt=0, le=10)
    kl_coef: float = Field(0.05, ge=0, le=1000)
    kl_estimator: Literal["k1", "k3"] = "k1"
    cliprange: float = Field(0.2, gt=0, lt=1)
    cliprange_value: float = Field(0.2, gt=0, le=1000)
    vf_coef: float = Field(0.1, ge=0, le=1000)
    gamma: float = Field(1.0, ge=0, le=1)
    lam: float = Field(0.95, ge=0, le=1)
    num_ppo_epochs: int = Field(4, ge=1, le=100)
    num_mini_batches: int = Field(1, ge=1, le=65_536)
    whiten_rewards: bool = False
    missing_eos_penalty: float | None = Field(None, ge=0, description="Subtracted from the score without EOS.")

    def check(self, ctx: CheckContext) -> list[tuple[str, str]]:
        errors = []
        if ctx.requires_reward_model and self.reward_model_path is None:
            errors.append(("algorithm.reward_model_path", f"engine {ctx.engine}'s PPO needs a reward model"))
        local_batch = ctx.per_device_batch_size * ctx.gradient_accumulation_steps
        if local_batch % self.num_mini_batches:
            errors.append(
                (
                    "algorithm.num_mini_batches",
                    f"must divide per_device_batch_size x gradient_accumulation_steps ({local_batch})",
                )
            )
        elif self.whiten_rewards and local_batch // self.num_mini_batches < 8:
            errors.append(("algorithm.whiten_rewards", "needs a mini-batch of at least 8 samples"))
        if ctx.quantization != "none":
            errors.append(("model.lora.quantization", "QLoRA is not supported with PPO"))
        return errors


ALGORITHM = AlgorithmSpec(
    name="ppo",
    params=Params,
    data_kind="rl",
    description="PPO against a reward model, with a learned value model (GAE).",
    metrics=("objective/kl", "objective/rlhf_reward", "loss/policy_avg", "loss/value_avg"),
)

"""PPO with a learned reward model and value model (trl 1.12 `trl.experimental.ppo`).

TRL's PPO scores completions with sequence-classification models (no python reward functions) and trains on
prompts tokenized to `input_ids`; both are prepared here from the configured paths and the RL prompt data.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from training_platform.training.algorithms.base import AlgorithmParams, AlgorithmSpec
from training_platform.userpath import UserDir


class Params(AlgorithmParams):
    name: Literal["ppo"]
    reward_model_path: UserDir = Field(min_length=1, description=
        "Sequence-classification reward model (num_labels=1).")
    value_model_path: UserDir | None = Field(None, description="Initial value model; defaults to reward_model_path.")
    total_episodes: int | None = Field(None, ge=1, le=1_000_000_000,
                                       description="Prompts to roll out; default from steps/epochs.")
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

    def check(self, cfg):
        errors = []
        t = cfg.training
        local_batch = t.per_device_batch_size * t.gradient_accumulation_steps
        if local_batch % self.num_mini_batches:
            errors.append(("algorithm.num_mini_batches",
                           f"must divide per_device_batch_size x gradient_accumulation_steps ({local_batch})"))
        elif self.whiten_rewards and local_batch // self.num_mini_batches < 8:
            errors.append(("algorithm.whiten_rewards", "needs a mini-batch of at least 8 samples"))
        if cfg.model.lora is not None and cfg.model.lora.quantization != "none":
            errors.append(("model.lora.quantization", "QLoRA is not supported with PPO"))
        return errors


def build_trainer(ctx):
    from transformers import AutoModelForSequenceClassification
    from trl.experimental.ppo import PPOConfig, PPOTrainer

    p: Params = ctx.cfg.algorithm
    t = ctx.cfg.training
    total_episodes = p.total_episodes
    if total_episodes is None and t.max_steps is not None:
        total_episodes = t.max_steps * t.per_device_batch_size * t.gradient_accumulation_steps * ctx.world_size
    reward_path = ctx.resolve(p.reward_model_path)
    value_path = ctx.resolve(p.value_model_path or p.reward_model_path)
    args = PPOConfig(
        **ctx.common_args, total_episodes=total_episodes, response_length=p.response_length,
        temperature=p.temperature, kl_coef=p.kl_coef, kl_estimator=p.kl_estimator, cliprange=p.cliprange,
        cliprange_value=p.cliprange_value, vf_coef=p.vf_coef, gamma=p.gamma, lam=p.lam,
        num_ppo_epochs=p.num_ppo_epochs, num_mini_batches=p.num_mini_batches, whiten_rewards=p.whiten_rewards,
        missing_eos_penalty=p.missing_eos_penalty, stop_token="eos", num_sample_generations=0,
        sft_model_path=str(ctx.model_path), reward_model_path=str(reward_path),
    )
    kwargs = ctx.model_load_kwargs()
    reward_model = AutoModelForSequenceClassification.from_pretrained(reward_path, num_labels=1, **kwargs)
    value_model = AutoModelForSequenceClassification.from_pretrained(value_path, num_labels=1, **kwargs)
    for m in (reward_model, value_model):
        if m.config.pad_token_id is None:
            m.config.pad_token_id = ctx.tokenizer.pad_token_id
    ctx.tokenizer.padding_side = "left"  # generation batches are left-padded
    return PPOTrainer(
        args=args, processing_class=ctx.tokenizer, model=ctx.model, ref_model=None, reward_model=reward_model,
        train_dataset=ctx.train_dataset, value_model=value_model, eval_dataset=ctx.eval_dataset,
        callbacks=ctx.callbacks, peft_config=ctx.peft_config,
    )


ALGORITHM = AlgorithmSpec(
    name="ppo", params=Params, data_kind="rl", build_trainer=build_trainer, supports_resume=False,
    description="PPO against a reward model, with a learned value model (TRL experimental PPO).",
)

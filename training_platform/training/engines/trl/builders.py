"""TRL builders: one per algorithm, registered under the `trl` engine with what it can do.

Each turns the engine's TrainContext (model, tokenizer, datasets, the shared TrainingArguments keywords, callbacks)
into a TRL trainer configured from the algorithm's params. TRL is imported inside each builder: this module is
read by config validation. What every trainer takes the same way comes from `ctx.trainer_kwargs`; the config calls
still look alike (the duplicates tool pairs them by shape): TRL has one config class per algorithm, and each builder
passes its own fields to it; a shared helper would only hide which fields an algorithm sets.

Where an algorithm needs the engine's shared steps done differently (PPO: prompts tokenized up front, its own
rollout record and loss, the policy model saved), its builder registers `hooks=` a `TRLHooks` subclass; the engine
asks the hooks and never the algorithm's name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from training_platform.training.algorithms import dpo, grpo, kto, orpo, ppo, reward, rloo, sft, simpo
from training_platform.training.algorithms.base import GenerationParams, params_as
from training_platform.training.engines import register_builder
from training_platform.training.engines.trl.hooks import TRLHooks

# Launchers a builder declares are the ones its losses were checked under (tests/training/test_distributed.py:
# world size 2 x batch B == one process x 2B); the others run as one process until they are.
MULTI = ("local", "torchrun")
RAY = ("local", "torchrun", "ray")  # also checked on a 2-node Ray cluster (tests/training/test_ray.py)
# `sampling=True`: the trainer draws its rows through Trainer._get_train_sampler, which data.sampling replaces
# (training/sampling.py); TRL's experimental PPO builds its own DataLoader. The registration order is the order
# validation lists them in.

if TYPE_CHECKING:  # pragma: no cover
    from training_platform.training.config import JobConfig
    from training_platform.training.engines.trl.engine import TrainContext
    from training_platform.training.rollouts import RolloutWriter


class PPOHooks(TRLHooks):
    """TRL's experimental PPO: prompts as input_ids, rewards from get_reward, loss = pg + vf_coef * vf, the policy
    model (not the policy + value wrapper) saved."""

    def prepare_dataset(self, dataset: Any, tokenizer: Any, cfg: JobConfig) -> Any:
        return _tokenize_prompts(dataset, tokenizer, cfg.data.max_length)

    def loss_from(self, cfg: JobConfig) -> Callable[[dict], float | None]:
        vf_coef = params_as(cfg.algorithm, ppo.Params).vf_coef

        def loss_from(logs: dict) -> float | None:
            # TRL's PPO logs the two terms it optimises (pg_loss + vf_coef * vf_loss) but not their sum.
            if "loss/policy_avg" in logs and "loss/value_avg" in logs:
                return logs["loss/policy_avg"] + vf_coef * logs["loss/value_avg"]
            return None

        return loss_from

    def rollout_callback(self, cfg: JobConfig, rollouts: RolloutWriter, tokenizer: Any) -> Any:
        from training_platform.training.engines.trl.callbacks import PPORolloutCallback

        penalty = params_as(cfg.algorithm, ppo.Params).missing_eos_penalty
        return PPORolloutCallback(rollouts, tokenizer, missing_eos_penalty=penalty)

    def final_model(self, trainer: Any) -> Any:
        return trainer.policy_model


def _tokenize_prompts(dataset: Any, tokenizer: Any, max_length: int) -> Any:
    """PPO consumes prompts as `input_ids` (chat template + generation prompt for conversational prompts)."""

    def encode(row):
        prompt = row["prompt"]
        if isinstance(prompt, list):
            ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=False)
            if isinstance(ids, dict):
                ids = ids["input_ids"]
        else:
            ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        return {"input_ids": list(ids)[-max_length:]}

    return dataset.map(encode, remove_columns=dataset.column_names)


# GenerationParams fields that TRL's GRPOConfig / RLOOConfig take under the same names.
_GENERATION_FIELDS = {
    "num_generations",
    "max_completion_length",
    "temperature",
    "top_p",
    "top_k",
    "beta",
    "num_iterations",
    "epsilon",
    "epsilon_high",
    "steps_per_generation",
    "mask_truncated_completions",
    "log_completions",
}


def _generation_kwargs(params: GenerationParams) -> dict:
    return params.model_dump(include=_GENERATION_FIELDS)


@register_builder("trl", "sft", launchers=RAY, sampling=True)
def build_sft(ctx: TrainContext):
    from trl import SFTConfig, SFTTrainer

    p = params_as(ctx.cfg.algorithm, sft.Params)
    args = SFTConfig(
        **ctx.common_args,
        max_length=ctx.cfg.data.max_length,
        packing=p.packing,
        assistant_only_loss=p.assistant_only_loss,
        completion_only_loss=p.completion_only_loss,
    )
    return SFTTrainer(args=args, **ctx.trainer_kwargs)


@register_builder("trl", "dpo", launchers=RAY, sampling=True)
def build_dpo(ctx: TrainContext):
    from trl import DPOConfig, DPOTrainer

    p = params_as(ctx.cfg.algorithm, dpo.Params)
    extra: dict[str, Any] = {"loss_weights": p.loss_weights} if p.loss_weights else {}
    args = DPOConfig(
        **ctx.common_args,
        max_length=ctx.cfg.data.max_length,
        beta=p.beta,
        loss_type=list(p.loss_type),
        label_smoothing=p.label_smoothing,
        **extra,
    )
    return DPOTrainer(args=args, **ctx.trainer_kwargs)


@register_builder("trl", "kto", sampling=True)
def build_kto(ctx: TrainContext):
    from trl import KTOConfig, KTOTrainer

    p = params_as(ctx.cfg.algorithm, kto.Params)
    args = KTOConfig(
        **ctx.common_args,
        max_length=ctx.cfg.data.max_length,
        beta=p.beta,
        loss_type=p.loss_type,
        desirable_weight=p.desirable_weight,
        undesirable_weight=p.undesirable_weight,
    )
    return KTOTrainer(args=args, **ctx.trainer_kwargs)


@register_builder("trl", "orpo", sampling=True)
def build_orpo(ctx: TrainContext):
    from trl.experimental.orpo import ORPOConfig, ORPOTrainer

    p = params_as(ctx.cfg.algorithm, orpo.Params)
    args = ORPOConfig(
        **ctx.common_args,
        max_length=ctx.cfg.data.max_length,
        beta=p.beta,
        max_completion_length=p.max_completion_length,
    )
    return ORPOTrainer(args=args, **ctx.trainer_kwargs)


@register_builder("trl", "simpo", sampling=True)
def build_simpo(ctx: TrainContext):
    from trl.experimental.cpo import CPOConfig, CPOTrainer

    p = params_as(ctx.cfg.algorithm, simpo.Params)
    args = CPOConfig(
        **ctx.common_args,
        max_length=ctx.cfg.data.max_length,
        loss_type="simpo",
        beta=p.beta,
        simpo_gamma=p.simpo_gamma,
        cpo_alpha=p.cpo_alpha,
        label_smoothing=p.label_smoothing,
        max_completion_length=p.max_completion_length,
    )
    return CPOTrainer(args=args, **ctx.trainer_kwargs)


@register_builder("trl", "reward", model_kinds=("sequence_classification",), sampling=True)
def build_reward(ctx: TrainContext):
    from trl import RewardConfig, RewardTrainer

    p = params_as(ctx.cfg.algorithm, reward.Params)
    args = RewardConfig(
        **ctx.common_args,
        max_length=ctx.cfg.data.max_length,
        center_rewards_coefficient=p.center_rewards_coefficient,
    )
    return RewardTrainer(args=args, **ctx.trainer_kwargs)


@register_builder("trl", "grpo", launchers=MULTI, sampling=True)
def build_grpo(ctx: TrainContext):
    from trl import GRPOConfig, GRPOTrainer

    p = params_as(ctx.cfg.algorithm, grpo.Params)
    args = GRPOConfig(
        **ctx.common_args,
        **_generation_kwargs(p),
        loss_type=p.loss_type,
        importance_sampling_level=p.importance_sampling_level,
        scale_rewards=p.scale_rewards,
        reward_weights=ctx.reward_weights,
    )
    return GRPOTrainer(args=args, reward_funcs=ctx.reward_funcs, **ctx.trainer_kwargs)


@register_builder("trl", "rloo", sampling=True)
def build_rloo(ctx: TrainContext):
    from trl import RLOOConfig, RLOOTrainer

    p = params_as(ctx.cfg.algorithm, rloo.Params)
    args = RLOOConfig(
        **ctx.common_args,
        **_generation_kwargs(p),
        normalize_advantages=p.normalize_advantages,
        reward_clip_range=(p.reward_clip_range[0], p.reward_clip_range[1]) if p.reward_clip_range else None,
        reward_weights=ctx.reward_weights,
    )
    return RLOOTrainer(args=args, reward_funcs=ctx.reward_funcs, **ctx.trainer_kwargs)


@register_builder(
    "trl",
    "ppo",
    resume=False,
    notes="TRL's experimental PPO has no checkpoint resume; reward and value models are sequence classifiers",
    requires_reward_model=True,
    hooks=PPOHooks(),
)
def build_ppo(ctx: TrainContext):
    from transformers import AutoModelForSequenceClassification
    from trl.experimental.ppo import PPOConfig, PPOTrainer

    p = params_as(ctx.cfg.algorithm, ppo.Params)
    t = ctx.cfg.training
    total_episodes = p.total_episodes
    if total_episodes is None and t.max_steps is not None:
        total_episodes = t.max_steps * t.per_device_batch_size * t.gradient_accumulation_steps * ctx.world_size
    reward_model_path = p.reward_model_path
    assert reward_model_path is not None  # requires_reward_model: validation refuses PPO without one
    reward_path = ctx.resolve(reward_model_path)
    value_path = ctx.resolve(p.value_model_path or reward_model_path)
    args = PPOConfig(
        **ctx.common_args,
        total_episodes=total_episodes,
        response_length=p.response_length,
        temperature=p.temperature,
        kl_coef=p.kl_coef,
        kl_estimator=p.kl_estimator,
        cliprange=p.cliprange,
        cliprange_value=p.cliprange_value,
        vf_coef=p.vf_coef,
        gamma=p.gamma,
        lam=p.lam,
        num_ppo_epochs=p.num_ppo_epochs,
        num_mini_batches=p.num_mini_batches,
        whiten_rewards=p.whiten_rewards,
        missing_eos_penalty=p.missing_eos_penalty,
        stop_token="eos",
        num_sample_generations=0,
        sft_model_path=str(ctx.model_path),
        reward_model_path=str(reward_path),
    )
    kwargs = ctx.model_load_kwargs()
    reward_model = AutoModelForSequenceClassification.from_pretrained(reward_path, num_labels=1, **kwargs)
    value_model = AutoModelForSequenceClassification.from_pretrained(value_path, num_labels=1, **kwargs)
    for m in (reward_model, value_model):
        if m.config.pad_token_id is None:
            m.config.pad_token_id = ctx.tokenizer.pad_token_id
    ctx.tokenizer.padding_side = "left"  # generation batches are left-padded
    return PPOTrainer(
        args=args, ref_model=None, reward_model=reward_model, value_model=value_model, **ctx.trainer_kwargs
    )

# Just over 600 lines: THE table from our fields to verl's keys is one table by design (docs/engines.md).
"""Job config -> verl config: the one table that maps our fields onto verl's (docs/engines.md prints it).

verl's trainers read a Hydra config composed from `verl.trainer.config` (`sft_trainer_engine` for SFT,
`ppo_trainer` for the RL family). We compose its defaults offline, then set each key below from the job; user
`verl.overrides` (checked in `checks.py`) come last. Each row: our field (for the docs and error messages), verl's
key, and how the value is computed. A row whose function returns SKIP leaves verl's default.

Batch sizes: our `per_device_batch_size` counts sequences per process per micro step; for RL it counts completions
(as in TRL), so verl's prompt batch = per_device_batch_size x world size x gradient_accumulation_steps / n.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from training_platform.training.algorithms import grpo, ppo, reinforce_pp, rloo
from training_platform.training.algorithms.base import GenerationParams, params_as
from training_platform.training.tools import MAX_RESULT_CHARS

if TYPE_CHECKING:  # pragma: no cover
    from training_platform.training.config import JobConfig

SFT_CONFIG = "sft_trainer_engine"
RL_CONFIG = "ppo_trainer"
RL_ALGORITHMS = ("grpo", "rloo", "ppo", "reinforce_pp")
SKIP = object()
# Keys verl's dataclasses accept but its YAML does not list (so composing does not create them): added, not set.
ADDED_KEYS = frozenset(
    {
        "engine.mixed_precision",
        "actor_rollout_ref.actor.fsdp_config.mixed_precision",
        "actor_rollout_ref.ref.fsdp_config.mixed_precision",
        "critic.fsdp.mixed_precision",
    }
)

# Our GRPO loss types -> verl's loss aggregation (verl's docs: DAPO = token-mean, Dr. GRPO = seq-mean-token-sum-norm,
# GRPO's original = seq-mean-token-mean; BNPO normalises by the batch's tokens = token-mean).
LOSS_AGG = {
    "grpo": "seq-mean-token-mean",
    "dapo": "token-mean",
    "dr_grpo": "seq-mean-token-sum-norm",
    "bnpo": "token-mean",
}
# Our KL estimator names -> verl's kl_loss_type / kl_penalty names.
KL_TYPE = {"k1": "kl", "k2": "mse", "k3": "low_var_kl", "mse": "mse", "low_var_kl": "low_var_kl"}
LR_SCHEDULER = {"constant": "constant", "constant_with_warmup": "constant", "cosine": "cosine"}


@dataclass(frozen=True)
class VerlPaths:
    """Files the generated config points at (made by the engine before training)."""

    model: str  # the resolved local model directory (or hub id)
    train_files: str  # parquet converted from data.train_file
    val_files: str | None
    local_dir: str  # verl's checkpoint directory (its global_step_N), mapped to checkpoints/step_NNNNNN
    reward_module: str | None = None  # the generated custom_reward_function file (RL)
    rollout_dir: str | None = None  # RL: verl dumps each step's rollouts here (<step>.jsonl) -> rollouts.jsonl
    critic_model: str | None = None  # ppo: the value model (default: the policy model)
    reward_model: str | None = None  # ppo: a reward model, when the job names one (served by reward_server.py)
    tools_config: str | None = None  # RL with `agent`: the tools YAML verl's agent loop loads (engines/verl/agent)


@dataclass(frozen=True)
class Row:
    ours: str  # our field, as users write it ("" for values we fix)
    verl: str  # verl's key
    value: Callable[[JobConfig, VerlPaths], Any]
    applies_to: tuple[str, ...] = ("sft", *RL_ALGORITHMS)
    why: str = ""  # shown in docs/engines.md


def world(cfg: JobConfig) -> int:
    return cfg.resources.num_nodes * cfg.resources.num_devices


def sequences_per_step(cfg: JobConfig) -> int:
    return cfg.training.per_device_batch_size * world(cfg) * cfg.training.gradient_accumulation_steps


def generations(cfg: JobConfig) -> int:
    return getattr(cfg.algorithm, "num_generations", 1)


def prompts_per_step(cfg: JobConfig) -> int:
    return max(1, sequences_per_step(cfg) // generations(cfg))


def device(cfg: JobConfig) -> str:
    """cuda or cpu (verl has no mps); `auto` is what this process sees, as with TRL."""
    if cfg.resources.device == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return "cuda" if cfg.resources.device == "cuda" else "cpu"


def rollout(cfg: JobConfig) -> str:
    """The rollout engine verl runs: `verl.rollout`, with auto = vllm where a GPU and vLLM are present, else hf."""
    if cfg.verl.rollout != "auto":
        return cfg.verl.rollout
    import importlib.util

    return "vllm" if device(cfg) == "cuda" and importlib.util.find_spec("vllm") is not None else "hf"


def _cpu(value: Any) -> Callable[[JobConfig, VerlPaths], Any]:
    """A row's value on CPU only (GPUs keep verl's default)."""
    return lambda c, p: value if device(c) == "cpu" else SKIP


def _fp32_precision(cfg: JobConfig) -> Any:
    return {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"} if _dtype(cfg) == "fp32" else SKIP


def _dtype(cfg: JobConfig) -> str:
    return {"bf16": "bfloat16", "fp16": "float16"}.get(cfg.model.dtype, "fp32")


def _epochs(cfg: JobConfig) -> int:
    """With max_steps, as many epochs as it takes (as with TRL): verl stops at total_training_steps."""
    if cfg.training.max_steps is not None:
        return cfg.training.max_steps
    return max(1, math.ceil(cfg.training.num_epochs))


def _generation(cfg: JobConfig) -> GenerationParams:
    """The params of grpo, rloo or reinforce_pp (rows that apply only to them)."""
    return params_as(cfg.algorithm, GenerationParams)


def _ppo(cfg: JobConfig) -> ppo.Params:
    """The params of ppo (rows that apply only to it)."""
    return params_as(cfg.algorithm, ppo.Params)


def _adv_estimator(cfg: JobConfig) -> str:
    a = cfg.algorithm
    if isinstance(a, reinforce_pp.Params):
        return "reinforce_plus_plus_baseline" if a.baseline else "reinforce_plus_plus"
    return {"grpo": "grpo", "rloo": "rloo", "ppo": "gae"}[a.name]


def _loss_mode(cfg: JobConfig) -> Any:
    a = cfg.algorithm
    if isinstance(a, grpo.Params) and a.importance_sampling_level == "sequence":
        return "gspo"
    return "vanilla"


def _loss_agg(cfg: JobConfig) -> Any:
    a = cfg.algorithm
    if isinstance(a, grpo.Params):
        return "seq-mean-token-mean" if a.importance_sampling_level == "sequence" else LOSS_AGG[a.loss_type]
    return "token-mean"


def _kl_loss(cfg: JobConfig) -> bool:
    """GRPO and REINFORCE++ put the KL in the loss; RLOO and PPO in the reward (as TRL does)."""
    a = cfg.algorithm
    return isinstance(a, grpo.Params | reinforce_pp.Params) and a.beta > 0


def _kl_in_reward(cfg: JobConfig) -> bool:
    a = cfg.algorithm
    return (isinstance(a, rloo.Params) and a.beta > 0) or (isinstance(a, ppo.Params) and a.kl_coef > 0)


def _kl_coef(cfg: JobConfig) -> Any:
    a = cfg.algorithm
    return a.kl_coef if isinstance(a, ppo.Params) else getattr(a, "beta", SKIP)


def _response_length(cfg: JobConfig) -> int:
    a = cfg.algorithm
    return a.response_length if isinstance(a, ppo.Params) else _generation(cfg).max_completion_length


def _temperature(cfg: JobConfig) -> float:
    a = cfg.algorithm
    return a.temperature if isinstance(a, ppo.Params) else _generation(cfg).temperature


def _agent(value: Callable[[Any], Any]) -> Callable[[JobConfig, VerlPaths], Any]:
    """A row's value for a job with `agent` (tool calling in the rollouts); others keep verl's default."""
    return lambda c, p: value(c.agent) if c.agent is not None else SKIP


_SFT = ("sft",)
_RL = RL_ALGORITHMS
_ACTOR = "actor_rollout_ref.actor"
_ROLLOUT = "actor_rollout_ref.rollout"
_MODEL = "actor_rollout_ref.model"

ROWS: tuple[Row, ...] = (
    # ---- model
    Row("model.path", "model.path", lambda c, p: p.model, _SFT),
    Row("model.path", f"{_MODEL}.path", lambda c, p: p.model, _RL),
    Row("model.trust_remote_code", "model.trust_remote_code", lambda c, p: c.model.trust_remote_code, _SFT),
    Row("model.trust_remote_code", f"{_MODEL}.trust_remote_code", lambda c, p: c.model.trust_remote_code, _RL),
    Row(
        "model.gradient_checkpointing",
        "model.enable_gradient_checkpointing",
        lambda c, p: c.model.gradient_checkpointing,
        _SFT,
    ),
    Row(
        "model.gradient_checkpointing",
        f"{_MODEL}.enable_gradient_checkpointing",
        lambda c, p: c.model.gradient_checkpointing,
        _RL,
    ),
    Row("model.lora.r", "model.lora_rank", lambda c, p: c.model.lora.r if c.model.lora else 0, _SFT),
    Row("model.lora.r", f"{_MODEL}.lora_rank", lambda c, p: c.model.lora.r if c.model.lora else 0, _RL),
    Row("model.lora.alpha", "model.lora_alpha", lambda c, p: c.model.lora.alpha if c.model.lora else SKIP, _SFT),
    Row("model.lora.alpha", f"{_MODEL}.lora_alpha", lambda c, p: c.model.lora.alpha if c.model.lora else SKIP, _RL),
    Row(
        "model.lora.target_modules",
        "model.target_modules",
        lambda c, p: c.model.lora.target_modules if c.model.lora else SKIP,
        _SFT,
    ),
    Row(
        "model.lora.target_modules",
        f"{_MODEL}.target_modules",
        lambda c, p: c.model.lora.target_modules if c.model.lora else SKIP,
        _RL,
    ),
    Row("model.dtype", "engine.model_dtype", lambda c, p: _dtype(c), _SFT, "weights' dtype in the FSDP engine"),
    Row(
        "model.dtype",
        "engine.mixed_precision",
        lambda c, p: (
            {"param_dtype": _dtype(c), "reduce_dtype": "fp32", "buffer_dtype": "fp32"} if _dtype(c) == "fp32" else SKIP
        ),
        _SFT,
        "fp32 end to end when the job asks for fp32 (verl's default is bf16)",
    ),
    Row("", "engine.strategy", lambda c, p: "fsdp2", _SFT, "FSDP2 runs on CPU (gloo) and GPUs"),
    Row("", "engine.use_torch_compile", lambda c, p: device(c) == "cuda", _SFT),
    Row(
        "",
        "model.override_config",
        lambda c, p: {"attn_implementation": "sdpa"} if device(c) == "cpu" else SKIP,
        _SFT,
        "sdpa attention on CPU (no flash-attention)",
    ),
    # ---- data
    Row("data.train_file", "data.train_files", lambda c, p: p.train_files, why="converted to verl's parquet"),
    Row("data.eval_file", "data.val_files", lambda c, p: p.val_files, _SFT),
    Row(
        "data.eval_file",
        "data.val_files",
        lambda c, p: p.val_files or p.train_files,
        _RL,
        "verl's RL trainer always builds a validation set; without eval data it is never run (test_freq -1)",
    ),
    Row("data.max_length", "data.max_length", lambda c, p: c.data.max_length, _SFT),
    Row("", "data.truncation", lambda c, p: "right", _SFT, "long rows are cut like TRL's, not an error"),
    Row("", "data.messages_key", lambda c, p: "messages", _SFT),
    Row("", "data.use_dynamic_bsz", lambda c, p: False, _SFT, "fixed batches: the same samples per step as TRL"),
    Row("", "data.num_workers", lambda c, p: c.training.dataloader_num_workers, _SFT),
    Row(
        "data.max_length",
        "data.max_prompt_length",
        lambda c, p: c.data.max_length - _response_length(c),
        _RL,
        "prompt budget = max_length - completion length",
    ),
    Row("algorithm.max_completion_length", "data.max_response_length", lambda c, p: _response_length(c), _RL),
    Row("", "data.filter_overlong_prompts", lambda c, p: True, _RL),
    Row("", "data.truncation", lambda c, p: "error", _RL),
    Row("data.shuffle_seed", "data.seed", lambda c, p: c.data.shuffle_seed, _RL),
    Row(
        "training.dataloader_num_workers",
        "data.dataloader_num_workers",
        lambda c, p: c.training.dataloader_num_workers,
        _RL,
    ),
    # ---- batch sizes
    Row(
        "training.per_device_batch_size",
        "data.train_batch_size",
        lambda c, p: sequences_per_step(c),
        _SFT,
        "x world size x gradient_accumulation_steps (global batch)",
    ),
    Row(
        "training.per_device_batch_size",
        "data.micro_batch_size_per_gpu",
        lambda c, p: c.training.per_device_batch_size,
        _SFT,
    ),
    Row(
        "training.per_device_batch_size",
        "data.train_batch_size",
        lambda c, p: prompts_per_step(c),
        _RL,
        "prompts per step = completions per step / n",
    ),
    Row(
        "training.per_device_batch_size",
        f"{_ACTOR}.ppo_mini_batch_size",
        lambda c, p: prompts_per_step(c),
        _RL,
        "one policy update per generation batch (x ppo_epochs)",
    ),
    Row(
        "training.per_device_batch_size",
        f"{_ACTOR}.ppo_micro_batch_size_per_gpu",
        lambda c, p: c.training.per_device_batch_size,
        _RL,
    ),
    Row(
        "training.per_device_batch_size",
        f"{_ROLLOUT}.log_prob_micro_batch_size_per_gpu",
        lambda c, p: c.training.per_device_batch_size,
        _RL,
    ),
    Row(
        "training.per_device_batch_size",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
        lambda c, p: c.training.per_device_batch_size,
        _RL,
    ),
    Row(
        "training.per_device_batch_size",
        "critic.ppo_micro_batch_size_per_gpu",
        lambda c, p: c.training.per_device_batch_size,
        ("ppo",),
    ),
    Row("training.per_device_batch_size", "critic.ppo_mini_batch_size", lambda c, p: prompts_per_step(c), ("ppo",)),
    # ---- optimisation
    Row("training.learning_rate", "optim.lr", lambda c, p: c.training.learning_rate, _SFT),
    Row("training.learning_rate", f"{_ACTOR}.optim.lr", lambda c, p: c.training.learning_rate, _RL),
    Row("training.learning_rate", "critic.optim.lr", lambda c, p: c.training.learning_rate, ("ppo",)),
    Row("training.weight_decay", "optim.weight_decay", lambda c, p: c.training.weight_decay, _SFT),
    Row("training.weight_decay", f"{_ACTOR}.optim.weight_decay", lambda c, p: c.training.weight_decay, _RL),
    Row("training.warmup_ratio", "optim.lr_warmup_steps_ratio", lambda c, p: c.training.warmup_ratio, _SFT),
    Row("training.warmup_ratio", f"{_ACTOR}.optim.lr_warmup_steps_ratio", lambda c, p: c.training.warmup_ratio, _RL),
    Row("training.warmup_steps", "optim.lr_warmup_steps", lambda c, p: c.training.warmup_steps or -1, _SFT),
    Row("training.warmup_steps", f"{_ACTOR}.optim.lr_warmup_steps", lambda c, p: c.training.warmup_steps or -1, _RL),
    Row(
        "training.lr_scheduler",
        "optim.lr_scheduler_type",
        lambda c, p: LR_SCHEDULER.get(c.training.lr_scheduler, "constant"),
        _SFT,
        "verl has constant (with warm-up) and cosine; others fall back to constant (POST /jobs/validate warns)",
    ),
    Row(
        "training.lr_scheduler",
        f"{_ACTOR}.optim.lr_scheduler_type",
        lambda c, p: LR_SCHEDULER.get(c.training.lr_scheduler, "constant"),
        _RL,
        "as for SFT: TRL's default `linear` decay has no verl equivalent (constant)",
    ),
    Row("training.max_grad_norm", "optim.clip_grad", lambda c, p: c.training.max_grad_norm, _SFT),
    Row("training.max_grad_norm", f"{_ACTOR}.grad_clip", lambda c, p: c.training.max_grad_norm, _RL),
    Row("training.seed", "trainer.seed", lambda c, p: c.training.seed, _SFT),
    Row("training.seed", "engine.seed", lambda c, p: c.training.seed, _SFT),
    Row("training.seed", f"{_ACTOR}.data_loader_seed", lambda c, p: c.training.seed, _RL),
    # ---- the RL algorithm
    Row(
        "algorithm.name",
        "algorithm.adv_estimator",
        lambda c, p: _adv_estimator(c),
        _RL,
        "grpo -> grpo, rloo -> rloo, ppo -> gae, reinforce_pp -> reinforce_plus_plus(_baseline)",
    ),
    Row("algorithm.num_generations", f"{_ROLLOUT}.n", lambda c, p: generations(c), ("grpo", "rloo", "reinforce_pp")),
    Row("", f"{_ROLLOUT}.n", lambda c, p: 1, ("ppo",)),
    Row("algorithm.temperature", f"{_ROLLOUT}.temperature", lambda c, p: _temperature(c), _RL),
    Row("algorithm.top_p", f"{_ROLLOUT}.top_p", lambda c, p: _generation(c).top_p, ("grpo", "rloo", "reinforce_pp")),
    Row(
        "algorithm.top_k",
        f"{_ROLLOUT}.top_k",
        lambda c, p: _generation(c).top_k or -1,
        ("grpo", "rloo", "reinforce_pp"),
        "0 (off) -> -1",
    ),
    Row("verl.rollout", f"{_ROLLOUT}.name", lambda c, p: rollout(c), _RL, "auto: vllm with a GPU and vLLM, else hf"),
    Row("", f"{_ROLLOUT}.mode", lambda c, p: "async", _RL, "verl's agent loop calls the rollout servers"),
    Row(
        "",
        f"{_ROLLOUT}.calculate_log_probs",
        lambda c, p: True,
        _RL,
        "the rollout returns its log-probs: verl logs training/rollout_probs_diff_* (the rollout has the new weights)",
    ),
    Row("model.dtype", f"{_ROLLOUT}.dtype", lambda c, p: {"fp32": "float32"}.get(_dtype(c), _dtype(c)), _RL),
    Row(
        "verl.rollout",
        f"{_ROLLOUT}.free_cache_engine",
        lambda c, p: False if rollout(c) == "hf" else SKIP,
        _RL,
        "hf: the model stays loaded between steps (nothing to free)",
    ),
    Row(
        "",
        "trainer.v1.trainer_mode",
        lambda c, p: "sync",
        _RL,
        "on-policy; our plugin's sync trainer adds each reward function's metrics (engines/verl/trainer.py)",
    ),
    # ---- verl's RL on CPU (GPUs keep verl's defaults)
    Row("resources.device", f"{_ACTOR}.strategy", _cpu("fsdp2"), _RL, "cpu: FSDP2 (gloo)"),
    Row("resources.device", "critic.strategy", _cpu("fsdp2"), ("ppo",), "cpu: FSDP2 (gloo)"),
    Row("resources.device", f"{_ACTOR}.use_torch_compile", _cpu(False), _RL, "cpu: no torch.compile"),
    Row("resources.device", f"{_ACTOR}.fsdp_config.use_torch_compile", _cpu(False), _RL),
    Row("resources.device", "critic.fsdp.use_torch_compile", _cpu(False), ("ppo",)),
    Row(
        "resources.device",
        f"{_MODEL}.override_config",
        _cpu({"attn_implementation": "sdpa"}),
        _RL,
        "cpu: sdpa attention (no flash-attention)",
    ),
    Row("resources.device", "critic.model.override_config", _cpu({"attn_implementation": "sdpa"}), ("ppo",)),
    Row(
        "model.dtype", f"{_ACTOR}.fsdp_config.mixed_precision", lambda c, p: _fp32_precision(c), _RL, "fp32 end to end"
    ),
    Row("model.dtype", "actor_rollout_ref.ref.fsdp_config.mixed_precision", lambda c, p: _fp32_precision(c), _RL),
    Row("model.dtype", "critic.fsdp.mixed_precision", lambda c, p: _fp32_precision(c), ("ppo",)),
    Row("resources.device", f"{_ROLLOUT}.agent.num_workers", _cpu(1), _RL, "cpu: one agent-loop worker"),
    Row("resources.device", "reward.num_workers", _cpu(1), _RL, "cpu: one reward worker"),
    Row(
        "resources.device",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units",
        _cpu(1),
        _RL,
        "cpu: one TransferQueue storage unit (each reserves a Ray CPU)",
    ),
    Row(
        "resources.num_devices",
        f"{_ROLLOUT}.tensor_model_parallel_size",
        lambda c, p: 1,
        _RL,
        "one rollout replica per GPU (raise it with verl.overrides for large models)",
    ),
    Row(
        "algorithm.num_iterations",
        f"{_ACTOR}.ppo_epochs",
        lambda c, p: _generation(c).num_iterations,
        ("grpo", "rloo", "reinforce_pp"),
    ),
    Row("algorithm.num_ppo_epochs", f"{_ACTOR}.ppo_epochs", lambda c, p: _ppo(c).num_ppo_epochs, ("ppo",)),
    Row(
        "algorithm.epsilon",
        f"{_ACTOR}.clip_ratio_low",
        lambda c, p: _generation(c).epsilon,
        ("grpo", "rloo", "reinforce_pp"),
    ),
    Row(
        "algorithm.epsilon_high",
        f"{_ACTOR}.clip_ratio_high",
        lambda c, p: _generation(c).epsilon_high or _generation(c).epsilon,
        ("grpo", "rloo", "reinforce_pp"),
        "DAPO's clip-higher; default = epsilon",
    ),
    Row("algorithm.cliprange", f"{_ACTOR}.clip_ratio", lambda c, p: _ppo(c).cliprange, ("ppo",)),
    Row("algorithm.cliprange", f"{_ACTOR}.clip_ratio_low", lambda c, p: _ppo(c).cliprange, ("ppo",)),
    Row("algorithm.cliprange", f"{_ACTOR}.clip_ratio_high", lambda c, p: _ppo(c).cliprange, ("ppo",)),
    Row("algorithm.cliprange_value", "critic.cliprange_value", lambda c, p: _ppo(c).cliprange_value, ("ppo",)),
    Row(
        "algorithm.loss_type",
        f"{_ACTOR}.loss_agg_mode",
        lambda c, p: _loss_agg(c),
        _RL,
        "grpo: seq-mean-token-mean, dapo/bnpo: token-mean, dr_grpo: seq-mean-token-sum-norm",
    ),
    Row(
        "algorithm.importance_sampling_level",
        f"{_ACTOR}.policy_loss.loss_mode",
        lambda c, p: _loss_mode(c),
        _RL,
        "sequence -> gspo (GSPO), token -> vanilla",
    ),
    Row(
        "algorithm.scale_rewards",
        "algorithm.norm_adv_by_std_in_grpo",
        lambda c, p: params_as(c.algorithm, grpo.Params).scale_rewards != "none",
        ("grpo",),
        "none (Dr. GRPO) -> false",
    ),
    Row("algorithm.beta", f"{_ACTOR}.use_kl_loss", lambda c, p: _kl_loss(c), _RL),
    Row("algorithm.beta", f"{_ACTOR}.kl_loss_coef", lambda c, p: _generation(c).beta if _kl_loss(c) else SKIP, _RL),
    Row(
        "algorithm.kl_estimator",
        f"{_ACTOR}.kl_loss_type",
        lambda c, p: KL_TYPE[params_as(c.algorithm, reinforce_pp.Params).kl_estimator] if _kl_loss(c) else SKIP,
        ("reinforce_pp",),
    ),
    Row("", f"{_ACTOR}.kl_loss_type", lambda c, p: "low_var_kl", ("grpo",), "k3, as TRL's GRPO"),
    Row("algorithm.beta", "algorithm.use_kl_in_reward", lambda c, p: _kl_in_reward(c), _RL),
    Row("algorithm.beta", "algorithm.kl_ctrl.kl_coef", lambda c, p: _kl_coef(c) if _kl_in_reward(c) else SKIP, _RL),
    Row(
        "algorithm.kl_estimator",
        "algorithm.kl_penalty",
        lambda c, p: KL_TYPE[_ppo(c).kl_estimator] if c.algorithm.name == "ppo" else SKIP,
        ("ppo",),
    ),
    Row("algorithm.gamma", "algorithm.gamma", lambda c, p: _ppo(c).gamma, ("ppo",)),
    Row("algorithm.lam", "algorithm.lam", lambda c, p: _ppo(c).lam, ("ppo",)),
    Row(
        "algorithm.value_model_path",
        "critic.model.path",
        lambda c, p: p.critic_model or p.model,
        ("ppo",),
        "default: the policy model",
    ),
    Row(
        "algorithm.reward_model_path",
        "reward.reward_model.enable",
        lambda c, p: False,
        ("ppo",),
        "the platform serves the reward model itself (engines/verl/reward_server.py: a Ray actor beside the rollout "
        "servers, on any device); the generated reward module asks it for each rollout's score",
    ),
    # ---- agent: multi-turn tool calling in the rollouts (engines/verl/agent)
    Row(
        "agent",
        f"{_ROLLOUT}.agent.default_agent_loop",
        _agent(lambda a: "platform_tool_agent"),
        _RL,
        "verl's tool agent loop with our tools, call budget, deadlines and per-turn records",
    ),
    Row(
        "agent.tools",
        f"{_ROLLOUT}.multi_turn.tool_config_path",
        lambda c, p: p.tools_config if c.agent is not None and p.tools_config else SKIP,
        _RL,
        "a generated verl/tools.yaml: each tool's schema and params (no secrets), and the episode's limits",
    ),
    Row(
        "agent",
        f"{_ROLLOUT}.multi_turn.enable",
        _agent(lambda a: True),
        _RL,
        "documentation only: verl's v1 agent loop does not read it",
    ),
    Row("agent.max_turns", f"{_ROLLOUT}.multi_turn.max_assistant_turns", _agent(lambda a: a.max_turns), _RL),
    Row(
        "agent.max_tool_calls",
        f"{_ROLLOUT}.multi_turn.max_user_turns",
        _agent(lambda a: a.max_tool_calls),
        _RL,
        "tool rounds; with one call per turn the same as calls (the loop also counts calls)",
    ),
    Row("agent", f"{_ROLLOUT}.multi_turn.max_parallel_calls", _agent(lambda a: 1), _RL, "one call per turn"),
    Row("agent.format", f"{_ROLLOUT}.multi_turn.format", _agent(lambda a: a.format), _RL),
    Row(
        "agent.tools",
        f"{_ROLLOUT}.multi_turn.max_tool_response_length",
        _agent(lambda a: MAX_RESULT_CHARS),
        _RL,
        "our tools cut their own results (max_output_chars, at most this): verl's default, 256 characters, would cut "
        "them again",
    ),
    Row(
        "algorithm.max_completion_length",
        "data.max_response_length",
        _agent(lambda a: SKIP),
        _RL,
        "with `agent`: the whole episode's response, tool results included (they are masked out of the loss)",
    ),
    # ---- rewards: our registered functions, called by verl
    Row(
        "rewards",
        "reward.custom_reward_function.path",
        lambda c, p: p.reward_module or SKIP,
        _RL,
        "a generated module that calls the job's reward functions with their weights",
    ),
    Row(
        "rewards", "reward.custom_reward_function.name", lambda c, p: "compute_score" if p.reward_module else SKIP, _RL
    ),
    # ---- schedule, checkpoints, resources
    Row(
        "training.num_epochs",
        "trainer.total_epochs",
        lambda c, p: _epochs(c),
        why="rounded up; with max_steps: as many as it takes",
    ),
    Row("training.max_steps", "trainer.total_training_steps", lambda c, p: c.training.max_steps),
    Row("training.save_steps", "trainer.save_freq", lambda c, p: c.training.save_steps),
    Row("training.eval_steps", "trainer.test_freq", lambda c, p: c.training.eval_steps or -1),
    Row("", "trainer.val_before_train", lambda c, p: False, _RL),
    Row(
        "",
        "trainer.max_ckpt_to_keep",
        lambda c, p: None,
        _SFT,
        "our RunWriter keeps training.keep_last_checkpoints of checkpoints/step_NNNNNN",
    ),
    Row(
        "",
        "trainer.max_actor_ckpt_to_keep",
        lambda c, p: None,
        _RL,
        "our RunWriter keeps training.keep_last_checkpoints of checkpoints/step_NNNNNN",
    ),
    Row("", "trainer.max_critic_ckpt_to_keep", lambda c, p: None, _RL, "as for the actor"),
    Row(
        "",
        "trainer.default_local_dir",
        lambda c, p: p.local_dir,
        why="each global_step_N is moved to checkpoints/step_NNNNNN once saved",
    ),
    Row(
        "",
        "trainer.resume_mode",
        lambda c, p: "disable",
        why="a resumed run sets resume_path to the global_step_N inside the checkpoint it resumes from",
    ),
    Row("", "trainer.logger", lambda c, p: ["console", "file"], _RL, "the file logger is merged into metrics.jsonl"),
    Row(
        "training.rollout_samples_per_step",
        "trainer.rollout_data_dir",
        lambda c, p: p.rollout_dir if c.training.rollout_samples_per_step and p.rollout_dir else SKIP,
        _RL,
        "verl dumps every rollout of step N to verl/rollouts/N.jsonl; a sample goes to rollouts.jsonl, the dump is "
        "removed (0: no dumps)",
    ),
    Row("", "trainer.logger", lambda c, p: ["console"], _SFT, "metrics go through our RunWriter"),
    Row("resources.num_devices", "trainer.n_gpus_per_node", lambda c, p: c.resources.num_devices),
    Row("resources.num_nodes", "trainer.nnodes", lambda c, p: c.resources.num_nodes),
    Row("resources.device", "trainer.device", lambda c, p: device(c)),
    Row("tracking.project", "trainer.project_name", lambda c, p: c.tracking.project or "training_platform"),
    Row("tracking.run_name", "trainer.experiment_name", lambda c, p: c.tracking.run_name or "run"),
)


def config_name(cfg: JobConfig) -> str:
    return SFT_CONFIG if cfg.algorithm.name == "sft" else RL_CONFIG


def assignments(cfg: JobConfig, paths: VerlPaths) -> dict[str, Any]:
    """verl key -> value for this job (the rows that apply, SKIP dropped; a later row for a key wins)."""
    out: dict[str, Any] = {}
    for row in ROWS:
        if cfg.algorithm.name not in row.applies_to:
            continue
        value = row.value(cfg, paths)
        if value is not SKIP:
            out[row.verl] = value
    return out


def table_markdown() -> str:
    """The mapping as a markdown table (docs/engines.md is checked against it)."""
    lines = ["| our field | verl key | algorithms | note |", "|---|---|---|---|"]
    for row in ROWS:
        applies = "all" if set(row.applies_to) == {"sft", *RL_ALGORITHMS} else ", ".join(row.applies_to)
        lines.append(
            f"| `{row.ours}` | `{row.verl}` | {applies} | {row.why} |"
            if row.ours
            else f"| (fixed) | `{row.verl}` | {applies} | {row.why} |"
        )
    return "\n".join(lines)

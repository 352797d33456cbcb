"""Our checks of a generated verl config: what verl 0.9.1's own `validate_config` lets through (a bad advantage
estimator or policy-loss mode, negative clip ratios, a string gamma, a missing model path or data file, a group
estimator with one rollout per prompt, an unknown rollout engine) and would crash on later, on the cluster.

Names come from verl's registries (`ADV_ESTIMATOR_REGISTRY`, `POLICY_LOSS_REGISTRY`), so a verl upgrade cannot
drift from us silently. Errors name the field the user wrote: ours when the value came from the mapping, the
`verl.overrides.<key>` when it came from an override. Then verl's own validation runs on the result.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

from training_platform.core.errors import FieldError

if TYPE_CHECKING:  # pragma: no cover
    from omegaconf import DictConfig

    from training_platform.training.config import JobConfig

# Estimators whose baseline is computed over a prompt's group of rollouts: n = 1 gives zero advantages.
GROUP_ESTIMATORS = frozenset(
    {
        "grpo",
        "grpo_passk",
        "grpo_vectorized",
        "rloo",
        "rloo_vectorized",
        "opo",
        "gpg",
        "gdpo",
        "reinforce_plus_plus_baseline",
    }
)
ROLLOUT_ENGINES = ("hf", "vllm", "sglang", "trtllm")
# Ray CPUs a private Ray gives a verl RL run beside its workers' bundles (one CPU each): room for the actors that
# hold none (task runner, TransferQueue: patches/transfer_queue_cpus.py, agent-loop and reward workers, servers).
EXTRA_CPUS = 2
ACTOR = "actor_rollout_ref.actor"
ROLLOUT = "actor_rollout_ref.rollout"
# verl key -> our field that sets it (errors name what the user wrote).
OUR_FIELD = {
    "algorithm.adv_estimator": "algorithm.name",
    f"{ACTOR}.policy_loss.loss_mode": "algorithm.importance_sampling_level",
    f"{ACTOR}.clip_ratio": "algorithm.cliprange",
    f"{ACTOR}.clip_ratio_low": "algorithm.epsilon",
    f"{ACTOR}.clip_ratio_high": "algorithm.epsilon_high",
    f"{ACTOR}.loss_agg_mode": "algorithm.loss_type",
    f"{ROLLOUT}.n": "algorithm.num_generations",
    f"{ROLLOUT}.name": "verl.rollout",
    "algorithm.gamma": "algorithm.gamma",
    "algorithm.lam": "algorithm.lam",
    "critic.cliprange_value": "algorithm.cliprange_value",
    "data.train_files": "data.train_file",
    "data.val_files": "data.eval_file",
    "model.path": "model.path",
    "actor_rollout_ref.model.path": "model.path",
    "critic.model.path": "algorithm.value_model_path",
    "data.max_prompt_length": "data.max_length",
}


def _field(cfg: JobConfig, key: str) -> str:
    return f"verl.overrides.{key}" if key in cfg.verl.overrides else OUR_FIELD.get(key, f"verl.overrides.{key}")


def registries() -> tuple[set[str], set[str]]:
    """verl's advantage estimators and policy-loss modes, as registered by verl itself."""
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, POLICY_LOSS_REGISTRY

    return set(ADV_ESTIMATOR_REGISTRY), set(POLICY_LOSS_REGISTRY)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_config(cfg: JobConfig, config: DictConfig) -> list[FieldError]:
    from omegaconf import OmegaConf

    errors: list[FieldError] = []

    def get(key: str) -> Any:
        return OmegaConf.select(config, key, default=None)

    def bad(key: str, reason: str) -> None:
        errors.append(FieldError(_field(cfg, key), reason))

    rl = cfg.algorithm.name != "sft"
    model_key = "actor_rollout_ref.model.path" if rl else "model.path"
    if not get(model_key):
        bad(model_key, "the model path is empty")
    if not rl:
        return errors + _verl_validate(cfg, config)

    estimators, loss_modes = registries()
    estimator = get("algorithm.adv_estimator")
    if estimator not in estimators:
        bad(
            "algorithm.adv_estimator",
            f"unknown advantage estimator {estimator!r}; verl has: {', '.join(sorted(estimators))}",
        )
    mode = get(f"{ACTOR}.policy_loss.loss_mode")
    if mode not in loss_modes:
        bad(
            f"{ACTOR}.policy_loss.loss_mode", f"unknown policy loss {mode!r}; verl has: {', '.join(sorted(loss_modes))}"
        )
    for key in (f"{ACTOR}.clip_ratio", f"{ACTOR}.clip_ratio_low", f"{ACTOR}.clip_ratio_high", "critic.cliprange_value"):
        value = get(key)
        if value is not None and (not _number(value) or value < 0):
            bad(key, f"a clip ratio must be a number >= 0, got {value!r}")
    clip_c = get(f"{ACTOR}.clip_ratio_c")
    if clip_c is not None and (not _number(clip_c) or clip_c <= 1):
        bad(f"{ACTOR}.clip_ratio_c", f"the dual-clip bound must be a number > 1, got {clip_c!r}")
    for key in ("algorithm.gamma", "algorithm.lam"):
        value = get(key)
        if not _number(value) or not 0 <= value <= 1:
            bad(key, f"must be a number in [0, 1], got {value!r}")
    n = get(f"{ROLLOUT}.n")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        bad(f"{ROLLOUT}.n", f"must be an integer >= 1, got {n!r}")
    elif estimator in GROUP_ESTIMATORS and n < 2:
        bad(
            f"{ROLLOUT}.n",
            f"{estimator} compares the rollouts of each prompt: needs n >= 2 rollouts per prompt, got {n}",
        )
    prompt = get("data.max_prompt_length")
    if not isinstance(prompt, int) or prompt < 1:
        bad("data.max_prompt_length", f"leaves no room for the prompt: max_length - completion length = {prompt!r}")
    engine = get(f"{ROLLOUT}.name")
    if engine not in ROLLOUT_ENGINES:
        bad(
            f"{ROLLOUT}.name",
            f"unknown rollout engine {engine!r}; verl's RL rollouts run on {', '.join(ROLLOUT_ENGINES)}",
        )
    if estimator == "gae" and not get("critic.model.path"):
        bad("critic.model.path", "GAE needs a critic model")
    if errors:  # verl's validation would only repeat them, less clearly
        return errors
    return _verl_validate(cfg, config)


def _verl_validate(cfg: JobConfig, config: DictConfig) -> list[FieldError]:
    """verl's own validation of the composed config (RL: `validate_config`; SFT: its dataclasses)."""
    try:
        if cfg.algorithm.name == "sft":
            from verl.utils.config import omega_conf_to_dataclass

            for section in ("engine", "optim", "checkpoint"):
                omega_conf_to_dataclass(config[section])
        else:
            from verl.utils.config import validate_config

            actor = config.actor_rollout_ref.actor
            validate_config(
                config,
                use_reference_policy=bool(actor.use_kl_loss or config.algorithm.use_kl_in_reward),
                use_critic=config.algorithm.adv_estimator == "gae",
            )
    except Exception as exc:  # noqa: BLE001 - verl raises assertion/value/instantiation errors alike
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        reason = next((line for line in lines if "full_key" not in line), type(exc).__name__)
        return [FieldError("engine", f"verl's validate_config rejects the generated config: {reason[:500]}")]
    return []


def rollout_problems(cfg: JobConfig) -> list[FieldError]:
    """A rollout engine asked for by name that cannot run here (any check, dry runs too)."""
    from training_platform.training.engines.verl import mapping

    name = cfg.verl.rollout
    if cfg.algorithm.name == "sft":
        return []
    if name in ("auto", "hf"):
        return []
    if importlib.util.find_spec(name) is None:
        return [FieldError("verl.rollout", f"{name} is not installed here; use hf (transformers) or auto")]
    if mapping.device(cfg) != "cuda":
        return [FieldError("verl.rollout", f"{name} runs on GPUs; this job runs on the CPU: use hf or auto")]
    return []


def runtime_problems(cfg: JobConfig, *, gpus: float | None, nodes: list[dict] | None = None) -> list[FieldError]:
    """What stops verl's RL from running here (preflight; not the dry run): GPUs for a GPU job; on a Ray cluster
    (`nodes`: its alive nodes, as ray_cluster.snapshot reads them) the CPUs verl's placement takes on CPU nodes."""
    if cfg.algorithm.name == "sft":
        return []
    from training_platform.training.engines.verl import mapping

    if mapping.device(cfg) == "cuda" and not gpus:
        return [FieldError("resources.device", f"this job asks for cuda; the cluster has {gpus or 0:g} GPUs")]
    if mapping.device(cfg) == "cpu" and nodes is not None:
        return cluster_cpu_problems(cfg.resources.num_nodes, cfg.resources.num_devices, nodes)
    return []


def cluster_cpu_problems(num_nodes: int, num_devices: int, nodes: list[dict]) -> list[FieldError]:
    """verl's CPU placement on a cluster: one placement group per node, each of `num_devices` bundles of one Ray CPU
    (a worker process each), packed on a node of its own (patches/node_per_group.py). The run holds them until it
    ends; verl's other actors hold no CPU."""

    def cpus(node: dict) -> float:
        return float(node["resources"].get("CPU", {}).get("total", 0.0))

    if len(nodes) < num_nodes:
        return [
            FieldError("resources.num_nodes", f"{num_nodes} nodes requested, the Ray cluster has {len(nodes)} alive")
        ]
    fitting = [n for n in nodes if cpus(n) >= num_devices]
    if len(fitting) < num_nodes:
        largest = max((cpus(n) for n in nodes), default=0.0)
        return [
            FieldError(
                "resources.num_devices",
                f"verl places {num_devices} worker processes (one Ray CPU each) on each of {num_nodes} nodes; "
                f"{len(fitting)} of the cluster's nodes have {num_devices} CPUs (the largest has {largest:g})",
            )
        ]
    return []

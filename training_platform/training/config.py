# Over 600 lines: every section of the job config's schema in one file, as the API, CLI and launch form read it.
"""The job config: one schema for YAML files, the API and the UI's launch form.

Validation happens in three layers, and every layer reports ALL its errors as (field path, reason):
1. `parse_config` - pydantic: types, ranges, unknown keys, algorithm chosen by `algorithm.name`.
2. `check_rules`  - cross-field rules that would otherwise fail deep inside TRL.
3. `preflight.check_environment` - rules that need the disk: files exist, the model's context length, LoRA target
   modules, dataset rows (see `training/preflight.py`).
`preflight.validate_config` runs all three and raises `ConfigError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias, Union

import yaml
from pydantic import BaseModel, Field, StringConstraints, ValidationError, field_validator, model_validator

from training_platform.core.errors import FieldError, InvalidInput, pydantic_errors
from training_platform.core.errors import translate_pydantic_error as _translate
from training_platform.core.files import yaml_load
from training_platform.core.settings import current_settings
from training_platform.core.userpath import ModelRef, UserFile
from training_platform.training.algorithms import ALGORITHMS
from training_platform.training.algorithms.base import AlgorithmParams, AlgorithmSpec, CheckContext, StrictModel
from training_platform.training.engine_registry import (
    ENGINES,
    Builder,
    engines_for,
    get_builder,
    sampling_algorithms,
    sampling_engines,
)
from training_platform.training.rewards import REWARDS, RewardSection


class ConfigError(InvalidInput):
    """A job config the validation layers refuse: every problem, one `path: reason` per line."""

    separator = "\n"


# ---------------------------------------------------------------------------------------------- sections

# Realistic maxima for counts (far above any real run, far below the database's INTEGER): a typo such as
# `max_steps: 10**30` is a 422 naming the field, not an overflow in the job row.
MAX_STEPS = 10_000_000


class LoraSection(StrictModel):
    r: int = Field(8, ge=1, le=1024, description="LoRA rank.")
    alpha: int = Field(16, ge=1, le=4096)
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: list[str] | Literal["all-linear"] = Field(
        "all-linear", description="Module name suffixes to adapt, or 'all-linear'."
    )
    quantization: Literal["none", "4bit", "8bit"] = Field(
        "none", description="QLoRA: load the base model quantized (CUDA + bitsandbytes)."
    )
    merge_final: bool = Field(True, description="Also write the merged full model to final/.")


class ModelSection(StrictModel):
    path: ModelRef = Field(min_length=1, description="Local HF model directory (relative to TP_DATA_DIR) or hub id.")
    dtype: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    trust_remote_code: bool = False
    lora: LoraSection | None = None
    gradient_checkpointing: bool = False


DataFormat = Literal[
    "auto", "messages", "sharegpt", "alpaca", "prompt_completion", "text", "preference", "kto", "rl_prompt", "verl"
]


class DifficultyMix(StrictModel):
    """Shares of the difficulty buckets of the audit/gate report (data/report.py); they must sum to 1."""

    easy: float = Field(0.0, ge=0, le=1)
    medium: float = Field(0.0, ge=0, le=1)
    hard: float = Field(0.0, ge=0, le=1)

    @model_validator(mode="after")
    def _sums_to_one(self) -> DifficultyMix:
        total = self.easy + self.medium + self.hard
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"the shares easy + medium + hard must sum to 1 (within 1e-6), got {total:.6g}")
        return self

    def as_dict(self) -> dict[str, float]:
        return {"easy": self.easy, "medium": self.medium, "hard": self.hard}


class CurriculumStage(StrictModel):
    until_step: int = Field(
        ge=1,
        le=MAX_STEPS,
        description="This mix is used up to and including this optimizer step; the last stage's mix continues after.",
    )
    mix: DifficultyMix


class SamplingSection(StrictModel):
    """Difficulty-aware sampling of training rows (training/sampling.py)."""

    strategy: Literal["uniform", "mix", "curriculum"] = Field(
        "uniform",
        description=(
            "uniform: the trainer's own shuffling; mix: every batch follows `mix`; curriculum: the mix of the "
            "schedule stage of the current step."
        ),
    )
    mix: DifficultyMix | None = Field(
        None, description="strategy mix: bucket shares, e.g. {easy: .2, medium: .4, hard: .4}."
    )
    schedule: list[CurriculumStage] = Field(
        default_factory=list, max_length=100, description=("strategy curriculum: stages with increasing until_step.")
    )
    seed: int | None = Field(None, ge=0, le=2**32 - 1, description="Sampler seed (default: training.seed).")


class GateSection(StrictModel):
    """`data.gate`: the train file must pass this quality-gate profile (a stored passing report for exactly this
    content and profile, or the gate is run at preflight); failing checks refuse the run unless an admin overrides."""

    profile: str = Field(
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
        description="Gate profile: default, strict, or one from TP_GATE_PROFILES_FILE / /api/v1/gate-profiles.",
    )
    eval_sets: list[UserFile] = Field(
        default_factory=list, max_length=20, description="Eval set files for the leakage check."
    )
    reference: UserFile | None = Field(None, description="Reference set for the n-gram divergence check.")
    reward_shadow_report: UserFile | None = Field(
        None,
        description=(
            "A passing `tp rewards shadow --report` file whose new scorer is this job's reward set, for a profile with "
            "the reward_shadow check (the platform also finds your passing POST /rewards/shadow reports itself)."
        ),
    )


class DataSection(StrictModel):
    train_file: UserFile = Field(min_length=1, description="JSONL/JSON/Parquet/CSV; relative to TP_DATA_DIR.")
    eval_file: UserFile | None = None
    format: DataFormat = Field("auto", description="Row format; 'auto' detects it from the columns.")
    field_map: dict[str, str] = Field(
        default_factory=dict, description="canonical field -> column in the file, e.g. {answer: solution}."
    )
    max_length: int = Field(512, ge=8, le=1_048_576, description="Max tokens per training sequence.")
    eval_split: float = Field(0.0, ge=0, lt=1, description="Fraction of train held out when no eval_file.")
    max_train_samples: int | None = Field(None, ge=1, le=100_000_000)
    shuffle_seed: int = Field(0, ge=0, le=2**32 - 1)
    sampling: SamplingSection | None = Field(
        None,
        description=("Difficulty-aware sampling by the buckets of the audit report (easy/medium/hard); engine trl."),
    )
    gate: GateSection | None = Field(
        None,
        description=(
            "A quality gate the training data must pass before the run starts (training_platform/data/gate/)."
        ),
    )


class TrainingSection(StrictModel):
    learning_rate: float = Field(5e-5, gt=0, le=1)
    lr_scheduler: Literal[
        "linear",
        "cosine",
        "cosine_with_restarts",
        "polynomial",
        "constant",
        "constant_with_warmup",
        "inverse_sqrt",
        "cosine_with_min_lr",
        "warmup_stable_decay",
    ] = "linear"
    warmup_ratio: float = Field(0.0, ge=0, lt=1)
    warmup_steps: int = Field(0, ge=0, le=MAX_STEPS)
    num_epochs: float = Field(1.0, gt=0, le=10_000)
    max_steps: int | None = Field(None, ge=1, le=MAX_STEPS, description="Overrides num_epochs when set.")
    per_device_batch_size: int = Field(8, ge=1, le=65_536)
    per_device_eval_batch_size: int = Field(8, ge=1, le=65_536)
    gradient_accumulation_steps: int = Field(1, ge=1, le=65_536)
    max_grad_norm: float = Field(1.0, ge=0, le=1e6)
    weight_decay: float = Field(0.0, ge=0, le=10)
    optimizer: Literal["adamw_torch", "adamw_torch_fused", "adafactor", "sgd", "adamw_8bit"] = "adamw_torch"
    seed: int = Field(42, ge=0, le=2**32 - 1)
    logging_steps: int = Field(10, ge=1, le=MAX_STEPS)
    save_steps: int = Field(100, ge=1, le=MAX_STEPS)
    eval_steps: int | None = Field(None, ge=1, le=MAX_STEPS, description="Evaluate every N steps (needs eval data).")
    keep_last_checkpoints: int = Field(3, ge=1, le=1000)
    dataloader_num_workers: int = Field(0, ge=0, le=64)
    rollout_samples_per_step: int = Field(
        8,
        ge=0,
        le=1024,
        description=(
            "RL (GRPO, RLOO, PPO; verl's too): rollouts kept per logging step in the run's rollouts.jsonl (prompt, "
            "completion, rewards, advantage), a seeded sample of that step's generations; 0 keeps none."
        ),
    )
    rollouts_max_mb: int = Field(
        100,
        ge=1,
        le=10_240,
        description=(
            "Size cap of rollouts.jsonl in MB: once reached no more rollouts are kept (training goes on; the log and "
            "run.json say at which step)."
        ),
    )
    reward_weights: Literal["normalise", "strict", "exact"] = Field(
        "normalise",
        description=(
            "Rule for rewards[*].weight: normalise (divided by their sum, a warning when it is not 1), exact (must sum "
            "to 1), strict (sum 1 and no reward above 0.5)."
        ),
    )


def resolve_launcher(launcher: str, *, num_nodes: int, num_devices: int) -> str:
    """`launcher: auto` made concrete: local for one process, torchrun for several on one node, ray across nodes."""
    if launcher != "auto":
        return launcher
    if num_nodes > 1:
        return "ray"
    return "torchrun" if num_devices > 1 else "local"


class ResourcesSection(StrictModel):
    device: Literal["auto", "cpu", "cuda", "mps"] = Field(
        "auto", description="auto: cuda, then mps (Apple GPU, one process), then cpu; the run records what it used."
    )
    num_devices: int = Field(
        1,
        ge=1,
        le=1024,
        description=(
            "Processes per node: GPUs per node, or CPU processes (gloo). World size = num_nodes x num_devices; "
            "training.per_device_batch_size is per process."
        ),
    )
    num_nodes: int = Field(
        1, ge=1, le=1024, description="Machines; more than one runs on the Ray cluster (TP_RAY_ADDRESS)."
    )
    launcher: Literal["auto", "local", "torchrun", "ray"] = Field(
        "auto", description="auto: local for one process, torchrun for several on one node, ray across nodes."
    )
    max_restarts: int = Field(
        0,
        ge=0,
        le=100,
        description="After a rank fails: restart every rank from the last "
        "checkpoint, at most this many times (0: fail the run).",
    )
    world_size: int | None = Field(
        None,
        ge=1,
        le=1_048_576,
        description=("Derived: num_nodes x num_devices (recorded in config_effective.yaml); when given it must match."),
    )

    @property
    def processes(self) -> int:
        """The world size: every process of the run, on every node."""
        return self.num_nodes * self.num_devices

    @property
    def resolved_launcher(self) -> str:
        return resolve_launcher(self.launcher, num_nodes=self.num_nodes, num_devices=self.num_devices)


VerlScalar = bool | int | float | Annotated[str, StringConstraints(max_length=1000)] | None
VERL_OVERRIDE_KEY = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*){0,9}$"
# verl keys a user's override may not set: each names code verl imports, a file or directory it reads or writes, the
# cluster it joins or where it sends metrics. The platform sets them from fields it checks (paths against the user's
# roots, the tracker against the operator's settings), or leaves verl's default.
VERL_CODE_KEYS = frozenset(
    {
        "external_lib",
        "custom_cls",
        "custom_reward_function",
        "trust_remote_code",
        "multi_turn",
        "agent",
        "ray_kwargs",
        "ray_init",
        "logger",
    }
)
VERL_PATH_SUFFIXES = ("path", "paths", "_dir", "_dirs", "_file", "_files", "_fn")


def verl_override_refusal(key: str) -> str | None:
    """Why a user may not override verl's `key` (None: they may)."""
    parts = key.split(".")
    if any(part in VERL_CODE_KEYS for part in parts):
        return (
            "names code verl imports, the cluster it joins or where it sends metrics: not overridable "
            "(the platform sets it)"
        )
    if any(part.endswith(VERL_PATH_SUFFIXES) or part == "dir" for part in parts):
        return (
            "names a file or directory: set it through the job's own fields (model.path, data.train_file, ...), "
            "which are checked against your paths"
        )
    return None


class VerlSection(StrictModel):
    """Options of `engine: verl` only (docs/engines.md)."""

    rollout: Literal["auto", "hf", "vllm", "sglang"] = Field(
        "auto",
        description="Rollout engine of verl's RL trainers: hf (transformers, runs anywhere), vllm or sglang (GPUs); "
        "auto = vllm where a GPU and vLLM are present, else hf.",
    )
    overrides: dict[
        Annotated[str, StringConstraints(pattern=VERL_OVERRIDE_KEY, max_length=200)],
        VerlScalar | Annotated[list[VerlScalar], Field(max_length=64)],
    ] = Field(
        default_factory=dict,
        max_length=100,
        description="verl config keys set after the mapping (e.g. {'algorithm.adv_estimator': 'grpo_passk'}); "
        "each is checked against verl's config and registries. Keys naming code, files, directories, the cluster or "
        "a metrics tracker are refused.",
    )

    @field_validator("overrides")
    @classmethod
    def _no_code_or_paths(cls, overrides: dict[str, Any]) -> dict[str, Any]:
        refused = [f"{key}: {reason}" for key in overrides if (reason := verl_override_refusal(key))]
        if refused:
            raise ValueError("; ".join(refused))
        return overrides


class AgentToolSection(StrictModel):
    """One tool of `agent.tools`; a bare name is short for {name: NAME}."""

    name: str = Field(
        min_length=1, max_length=64, description="A registered tool (GET /api/v1/config/tools lists them)."
    )
    params: dict[str, Any] = Field(default_factory=dict, description="The tool's own settings (checked by the tool).")


class AgentSection(StrictModel):
    """Multi-turn tool calling during RL rollouts (verl's agent loop): the model may call `tools` between its turns,
    their results come back as tool messages (masked out of the loss), and the episode is scored on its final answer
    (docs/plans/agentic-rl.md)."""

    tools: list[AgentToolSection] = Field(
        min_length=1, max_length=16, description="The tools the model may call, e.g. [calculator, {name: python}]."
    )
    max_turns: int = Field(4, ge=1, le=16, description="Assistant turns per episode; a model still calling is cut.")
    max_tool_calls: int = Field(3, ge=1, le=64, description="Tool calls per episode (one call per turn).")
    tool_timeout_s: float = Field(
        5.0, gt=0, le=60, description="Each call's time limit in seconds (the sandbox's wall clock, the HTTP timeout)."
    )
    format: Literal["hermes"] = Field(
        "hermes", description='How calls are written: hermes = <tool_call>{"name": ..., "arguments": ...}</tool_call>.'
    )
    tool_call_reward: float = Field(0.0, ge=-10, le=10, description="Added to the episode's score per successful call.")
    tool_error_reward: float = Field(
        0.0, ge=-10, le=10, description="Added to the episode's score per failed call (e.g. -0.1)."
    )

    @field_validator("tools", mode="before")
    @classmethod
    def _bare_names(cls, tools: Any) -> Any:
        if isinstance(tools, list):
            return [{"name": t} if isinstance(t, str) else t for t in tools]
        return tools


Tracker = Literal["none", "tensorboard", "wandb", "mlflow"]


def _no_tracker() -> list[Tracker]:
    return ["none"]


class TrackingSection(StrictModel):
    report_to: list[Tracker] = Field(default_factory=_no_tracker)
    project: str | None = Field(None, description="W&B / MLflow project or experiment name.")
    run_name: str | None = None


if TYPE_CHECKING:
    # mypy cannot see through types built from the registries: statically an engine is a str and every algorithm's
    # params are AlgorithmParams (code that reads an algorithm's own fields narrows to its Params class).
    EngineName: TypeAlias = str
    AlgorithmUnion: TypeAlias = AlgorithmParams
else:
    EngineName = Literal[tuple(ENGINES)]
    AlgorithmUnion = Annotated[
        Union[tuple(spec.params for spec in ALGORITHMS.values())],  # noqa: UP007 - built from the registry
        Field(discriminator="name"),
    ]


class JobConfig(StrictModel):
    engine: EngineName = Field("trl", description="Training engine (`tp algorithms list` shows what each engine runs).")
    model: ModelSection
    data: DataSection
    algorithm: AlgorithmUnion
    training: TrainingSection = Field(default_factory=TrainingSection)
    rewards: list[RewardSection] = Field(default_factory=list)
    resources: ResourcesSection = Field(default_factory=ResourcesSection)
    tracking: TrackingSection = Field(default_factory=TrackingSection)
    verl: VerlSection = Field(default_factory=VerlSection, description="engine: verl options.")
    agent: AgentSection | None = Field(
        None, description="Multi-turn tool calling in the rollouts of RL jobs on engine verl (grpo, rloo, ppo, ...)."
    )

    def has_eval(self) -> bool:
        return self.data.eval_file is not None or self.data.eval_split > 0

    @property
    def spec(self) -> AlgorithmSpec:
        return ALGORITHMS[self.algorithm.name]


# ---------------------------------------------------------------------------------------------- parsing


# pydantic names the member of a plain union in the location (`target_modules.list[str]`); not a field.
def _known_field_names() -> set[str]:
    names: set[str] = set()
    models: list[type[BaseModel]] = [
        JobConfig,
        ModelSection,
        LoraSection,
        DataSection,
        SamplingSection,
        CurriculumStage,
        DifficultyMix,
        TrainingSection,
        RewardSection,
        ResourcesSection,
        TrackingSection,
        AgentSection,
        AgentToolSection,
        *[s.params for s in ALGORITHMS.values()],
    ]
    for m in models:
        names.update(m.model_fields)
    return names


def translate_pydantic_error(
    err: Mapping[str, Any], prefix: str = "", known_fields: set[str] | None = None
) -> FieldError:
    """One pydantic error of a job config (core's translator with the config's field names for the "did you mean"
    hint and the algorithm tags of its discriminated union)."""
    return _translate(err, prefix, known_fields or _known_field_names(), {"algorithm": tuple(ALGORITHMS)})


def dedupe(errors: list[FieldError]) -> list[FieldError]:
    seen: set[tuple[str, ...]] = set()
    out = []
    for e in errors:
        if tuple(e) not in seen:
            seen.add(tuple(e))
            out.append(e)
    return out


def parse_config(raw: Any) -> JobConfig:
    """Layer 1: types, ranges, unknown keys. Raises ConfigError with every error."""
    if not isinstance(raw, dict):
        raise ConfigError([FieldError("<root>", f"the config must be a mapping, got {type(raw).__name__}")])
    try:
        return JobConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(
            pydantic_errors(exc, known_fields=_known_field_names(), union_tags={"algorithm": tuple(ALGORITHMS)})
        ) from None


def check_rules(cfg: JobConfig) -> list[FieldError]:
    """Layer 2: cross-field rules that need no disk access."""
    errors: list[FieldError] = []
    spec = cfg.spec
    t = cfg.training

    builder = get_builder(cfg.engine, spec.name)
    if builder is None:
        others = engines_for(spec.name)
        errors.append(
            FieldError(
                "engine",
                f"engine {cfg.engine!r} cannot train {spec.name}"
                + (f"; use {' or '.join(repr(e) for e in others)}" if others else ""),
            )
        )
    errors.extend(_resource_rules(cfg, builder))

    if t.warmup_ratio and t.warmup_steps:
        errors.append(FieldError("training.warmup_steps", "set warmup_steps or warmup_ratio, not both"))
    if t.eval_steps is not None and not cfg.has_eval():
        errors.append(FieldError("training.eval_steps", "evaluation needs data.eval_file or data.eval_split > 0"))
    if cfg.data.eval_file is not None and cfg.data.eval_split > 0:
        errors.append(FieldError("data.eval_split", "use data.eval_file or data.eval_split, not both"))

    if cfg.engine != "verl" and cfg.verl != VerlSection():
        errors.append(FieldError("verl", f"options of engine: verl; this job's engine is {cfg.engine}"))
    caps = builder.capabilities if builder is not None else None
    device = cfg.resources.device
    if caps is not None and device != "auto" and device not in caps.devices:
        errors.append(
            FieldError("resources.device", f"engine {cfg.engine} runs on {' or '.join(caps.devices)}, not {device}")
        )

    # Reward functions: RL algorithms that score completions with python functions need them; others must not
    # silently ignore them. Some builders score with them when the job names no reward model (verl's PPO).
    functions_instead_of_model = (
        caps is not None
        and caps.reward_functions_without_reward_model
        and getattr(cfg.algorithm, "reward_model_path", None) is None
    )
    # ... and add them to the reward model's score when it names one (verl's PPO: engines/verl/rewards.py).
    functions_beside_model = caps is not None and caps.reward_functions_without_reward_model and bool(cfg.rewards)
    if spec.uses_reward_functions or functions_instead_of_model or functions_beside_model:
        if not cfg.rewards:
            errors.append(FieldError("rewards", f"{spec.name} needs at least one reward function"))
        else:
            from training_platform.training.rewards.weights import check_reward_weights

            weight_errors, _, _ = check_reward_weights(cfg.rewards, mode=t.reward_weights)
            errors.extend(FieldError(p, r) for p, r in weight_errors)
    elif cfg.rewards:
        errors.append(
            FieldError(
                "rewards",
                f"{spec.name} does not use reward functions (only "
                f"{', '.join(n for n, s in ALGORITHMS.items() if s.uses_reward_functions)} do)",
            )
        )
    for i, reward in enumerate(cfg.rewards):
        definition = REWARDS.get(reward.name)
        if definition is None:
            errors.append(
                FieldError(f"rewards[{i}].name", f"unknown reward {reward.name!r}; known: {', '.join(sorted(REWARDS))}")
            )
            continue
        try:
            definition.params_model.model_validate(reward.params)
        except ValidationError as exc:
            fields = set(definition.params_model.model_fields)
            errors.extend(
                translate_pydantic_error(e, prefix=f"rewards[{i}].params", known_fields=fields) for e in exc.errors()
            )

    if cfg.model.dtype == "fp16" and cfg.resources.device == "cpu":
        errors.append(FieldError("model.dtype", "fp16 training needs a CUDA device; use fp32 or bf16 on cpu"))
    lora = cfg.model.lora
    if lora is not None and lora.quantization != "none" and cfg.resources.device == "cpu":
        errors.append(FieldError("model.lora.quantization", "QLoRA (4bit/8bit) needs a CUDA device"))
    if "none" in cfg.tracking.report_to and len(cfg.tracking.report_to) > 1:
        errors.append(FieldError("tracking.report_to", "'none' cannot be combined with other trackers"))

    errors.extend(_sampling_rules(cfg))
    errors.extend(_agent_rules(cfg, builder))
    errors.extend(FieldError(p, r) for p, r in cfg.algorithm.check(check_context(cfg, builder)))
    return errors


def _agent_rules(cfg: JobConfig, builder: Builder | None) -> list[FieldError]:
    agent = cfg.agent
    if agent is None:
        return []
    from training_platform.training.engine_registry import agent_loop_pairs
    from training_platform.training.tools import TOOLS, tool_names

    errors: list[FieldError] = []
    if builder is not None and not builder.capabilities.agent_loop:
        pairs = agent_loop_pairs()
        engines = sorted({e for e, _ in pairs})
        errors.append(
            FieldError(
                "agent",
                f"tool calling runs in the RL rollouts of engine {' or '.join(engines) or '(none)'} "
                f"({', '.join(a for _, a in pairs)}); not {cfg.engine} {cfg.spec.name}",
            )
        )
    seen: dict[str, int] = {}
    for i, tool in enumerate(agent.tools):
        definition = TOOLS.get(tool.name)
        if definition is None:
            errors.append(
                FieldError(f"agent.tools[{i}].name", f"unknown tool {tool.name!r}; known: {', '.join(tool_names())}")
            )
            continue
        if tool.name in seen:
            errors.append(
                FieldError(
                    f"agent.tools[{i}].name", f"{tool.name!r} is listed twice (also agent.tools[{seen[tool.name]}])"
                )
            )
        seen.setdefault(tool.name, i)
        try:
            definition.params_model.model_validate(tool.params)
        except ValidationError as exc:
            fields = set(definition.params_model.model_fields)
            errors.extend(
                translate_pydantic_error(e, prefix=f"agent.tools[{i}].params", known_fields=fields)
                for e in exc.errors()
            )
    if agent.max_tool_calls > agent.max_turns:
        errors.append(
            FieldError(
                "agent.max_tool_calls",
                f"an episode makes at most one call per turn: at most max_turns ({agent.max_turns}), "
                f"got {agent.max_tool_calls}",
            )
        )
    return errors


def check_context(cfg: JobConfig, builder: Builder | None) -> CheckContext:
    """The facts of the job and its engine an algorithm's own rules read (`AlgorithmParams.check`)."""
    t = cfg.training
    lora = cfg.model.lora
    return CheckContext(
        engine=cfg.engine,
        requires_reward_model=builder is not None and builder.capabilities.requires_reward_model,
        data_format=cfg.data.format,
        max_length=cfg.data.max_length,
        has_eval=cfg.has_eval(),
        per_device_batch_size=t.per_device_batch_size,
        per_device_eval_batch_size=t.per_device_eval_batch_size,
        gradient_accumulation_steps=t.gradient_accumulation_steps,
        world_size=cfg.resources.processes,
        quantization=lora.quantization if lora is not None else "none",
    )


def _sampling_rules(cfg: JobConfig) -> list[FieldError]:
    s = cfg.data.sampling
    if s is None:
        return []
    errors: list[FieldError] = []
    # Which (engine, algorithm) pairs support it is their builders' `sampling` capability: a trainer that draws its
    # rows through a sampler training/sampling.py can replace (TRL's experimental PPO builds its own DataLoader).
    supported = sampling_algorithms(cfg.engine)
    if not supported:
        errors.append(
            FieldError(
                "data.sampling",
                f"difficulty-aware sampling runs on engine {' or '.join(sampling_engines())}; engine {cfg.engine} "
                "does not support it yet",
            )
        )
    elif cfg.spec.name not in supported:
        errors.append(
            FieldError(
                "data.sampling",
                f"{cfg.spec.name} draws its rows with its own data loader: "
                f"difficulty-aware sampling supports "
                f"{', '.join(supported)}",
            )
        )
    if s.strategy != "uniform" and getattr(cfg.algorithm, "packing", False):
        errors.append(
            FieldError(
                "algorithm.packing",
                "packing merges rows into sequences: it cannot be combined "
                "with data.sampling (rows are drawn by difficulty)",
            )
        )
    if s.strategy == "mix" and s.mix is None:
        errors.append(FieldError("data.sampling.mix", "required for strategy mix"))
    if s.strategy != "mix" and s.mix is not None:
        errors.append(FieldError("data.sampling.mix", f"only used by strategy mix (this is {s.strategy})"))
    if s.strategy == "curriculum" and not s.schedule:
        errors.append(FieldError("data.sampling.schedule", "strategy curriculum needs at least one stage"))
    if s.strategy != "curriculum" and s.schedule:
        errors.append(FieldError("data.sampling.schedule", f"only used by strategy curriculum (this is {s.strategy})"))
    for i in range(1, len(s.schedule)):
        if s.schedule[i].until_step <= s.schedule[i - 1].until_step:
            errors.append(
                FieldError(
                    f"data.sampling.schedule[{i}].until_step",
                    f"must be greater than the previous stage's ({s.schedule[i - 1].until_step}), "
                    f"got {s.schedule[i].until_step}",
                )
            )
    return errors


def _resource_rules(cfg: JobConfig, builder) -> list[FieldError]:
    """Processes, nodes and launchers (the cluster itself is checked by preflight)."""

    r = cfg.resources
    errors: list[FieldError] = []
    launcher = r.resolved_launcher
    if r.world_size is not None and r.world_size != r.processes:
        errors.append(
            FieldError(
                "resources.world_size", f"must equal num_nodes x num_devices ({r.processes}), got {r.world_size}"
            )
        )
    if r.device == "mps" and r.processes > 1:
        errors.append(
            FieldError(
                "resources.num_devices",
                "mps trains in one process (one Apple GPU): num_devices and num_nodes must be 1",
            )
        )
    own_workers = builder is not None and builder.capabilities.own_workers  # verl RL: its own Ray workers
    if launcher == "local" and r.processes > 1 and not (own_workers and r.num_nodes == 1):
        errors.append(
            FieldError(
                "resources.launcher",
                f"local runs one process, but num_nodes x num_devices = {r.processes}: use torchrun (one node) or ray",
            )
        )
    elif launcher == "torchrun" and r.num_nodes > 1:
        errors.append(
            FieldError("resources.launcher", "torchrun starts the processes of one node; num_nodes > 1 needs ray")
        )
    elif launcher == "ray":
        if not current_settings().ray_address:
            errors.append(
                FieldError(
                    "resources.launcher",
                    "ray needs a cluster: set TP_RAY_ADDRESS (host:port or ray://host:port), or tp train --ray-address",
                )
            )
        elif r.device == "mps":
            errors.append(FieldError("resources.device", "mps runs one local process, not on a Ray cluster"))
    if builder is not None and launcher not in builder.capabilities.launchers:
        errors.append(
            FieldError(
                "resources.launcher",
                f"{cfg.engine} {cfg.spec.name} runs under {', '.join(builder.capabilities.launchers)}, not {launcher}",
            )
        )
    return errors


# ---------------------------------------------------------------------------------------------- files


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's multi-line message as one line: what is wrong and where."""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    mark = getattr(exc, "problem_mark", None)
    return f"{problem} (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else problem


def load_yaml(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return yaml_load(f)
    except FileNotFoundError:
        raise ConfigError([FieldError("<file>", f"config file not found: {path}")]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([FieldError("<file>", f"invalid YAML in {path}: {_yaml_problem(exc)}")]) from None


def apply_overrides(raw: dict, overrides: list[str]) -> dict:
    """`--set training.max_steps=50`: the value is parsed as YAML (50 -> int, true -> bool, [a,b] -> list), then set
    by core/overrides.py (a numeric part indexes a list: `--set rewards.0.weight=0.5`)."""
    from training_platform.core.overrides import OverrideError
    from training_platform.core.overrides import apply_overrides as apply_pairs

    pairs = []
    for item in overrides:
        if "=" not in item:
            raise ConfigError([FieldError("--set", f"expected KEY=VALUE, got {item!r}")])
        key, _, text = item.partition("=")
        try:
            pairs.append((key.strip(), yaml_load(text) if text != "" else ""))
        except yaml.YAMLError as exc:
            raise ConfigError(
                [FieldError(key, f"cannot parse override value {text!r}: {_yaml_problem(exc)}")]
            ) from None
    try:
        return apply_pairs(raw, pairs)
    except OverrideError as exc:
        raise ConfigError(exc.errors) from None


def effective_config(cfg: JobConfig) -> dict:
    """Every default filled in, as plain YAML-able data; the launcher resolved and the world size recorded."""
    data = cfg.model_dump(mode="json")
    data["resources"]["launcher"] = cfg.resources.resolved_launcher
    data["resources"]["world_size"] = cfg.resources.processes
    if cfg.engine != "verl":
        data.pop("verl")  # engine verl's options: not part of other engines' runs
    if cfg.agent is None:
        data.pop("agent")  # no tool calling: runs recorded before it existed read the same
    return data


def json_schema() -> dict:
    return JobConfig.model_json_schema()


def training_config_paths(cfg) -> list:
    """The marked paths of a validated JobConfig, reward params included (they are validated per reward; tool
    params name no path)."""
    from training_platform.core.userpath import user_paths
    from training_platform.training.rewards import get_reward

    found = list(user_paths(cfg))
    for i, reward in enumerate(cfg.rewards):
        try:
            params = get_reward(reward.name).params_model.model_validate(reward.params)
        except Exception:  # noqa: BLE001 - reported by the config rules; nothing to check here
            continue
        found += list(user_paths(params, f"rewards[{i}].params"))
    return found

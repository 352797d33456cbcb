"""What every algorithm module provides.

An algorithm module says what is trained and imports no engine (config validation imports every algorithm); the
engines register how (`training/engines/<engine>/builders.py`). It defines:
- a `Params` pydantic model with `name: Literal["<name>"]` and that algorithm's own hyper-parameters, range-checked;
- `ALGORITHM = AlgorithmSpec(...)`, registered with one line in `algorithms/__init__.py`.
Its cross-field rules (`Params.check`) read a `CheckContext`: the few facts of the job and its engine they need,
not the job config (which imports this package).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

# The dataset shape an algorithm trains on; `training.datasets` turns every supported file format into it.
DataKind = Literal["sft", "preference", "kto", "rl"]


class StrictModel(BaseModel):
    """Config section: unknown keys are errors, types are not coerced ("5" is not an int), floats are finite."""

    model_config = ConfigDict(extra="forbid", strict=True, validate_default=True, allow_inf_nan=False)


@dataclass(frozen=True)
class CheckContext:
    """What an algorithm's cross-field rules may read of the job (built by `config.check_rules`)."""

    engine: str
    # The engine's builder for this algorithm needs algorithm.reward_model_path (its Capabilities).
    requires_reward_model: bool
    data_format: str  # data.format
    max_length: int  # data.max_length
    has_eval: bool  # data.eval_file or data.eval_split > 0
    per_device_batch_size: int  # training.*
    per_device_eval_batch_size: int
    gradient_accumulation_steps: int
    world_size: int  # resources: num_nodes x num_devices
    quantization: str  # model.lora.quantization ("none" without LoRA)


class AlgorithmParams(StrictModel):
    name: str

    def check(self, ctx: CheckContext) -> list[tuple[str, str]]:
        """Cross-field rules that involve other sections. Returns (field path, reason) pairs."""
        return []


P = TypeVar("P", bound=AlgorithmParams)


def params_as(params: AlgorithmParams, kind: type[P]) -> P:
    """`params` as the Params class of the algorithm the caller already knows it is (a builder registered for that
    algorithm, a mapping row that applies only to it): JobConfig types `algorithm` as the base class, since its
    discriminated union is built from the registry at runtime."""
    if not isinstance(params, kind):
        raise TypeError(f"{kind.__module__}.{kind.__qualname__} expected, got the params of {params.name!r}")
    return params


class GenerationParams(AlgorithmParams):
    """Shared by the online RL algorithms that sample completions (GRPO, RLOO)."""

    num_generations: int = Field(8, ge=2, le=1024, description="Completions sampled per prompt (group size).")
    max_completion_length: int = Field(32, ge=1, le=32768, description="Max new tokens per completion.")
    temperature: float = Field(1.0, gt=0, le=10)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=0, le=1_000_000, description="0 disables top-k.")
    beta: float = Field(0.0, ge=0, le=1000, description="KL coefficient; 0 means no reference model.")
    num_iterations: int = Field(1, ge=1, le=64, description="Policy updates per generation batch (mu).")
    epsilon: float = Field(0.2, gt=0, lt=1, description="Lower clip range.")
    epsilon_high: float | None = Field(None, gt=0, lt=10, description="Upper clip range (DAPO clip-higher).")
    steps_per_generation: int | None = Field(None, ge=1, le=65_536)
    mask_truncated_completions: bool = False
    log_completions: bool = False

    def check(self, ctx: CheckContext) -> list[tuple[str, str]]:
        errors: list[tuple[str, str]] = []
        steps = self.steps_per_generation or ctx.gradient_accumulation_steps
        world = ctx.world_size
        generation_batch = ctx.per_device_batch_size * world * steps
        if generation_batch % self.num_generations:
            errors.append(
                (
                    "algorithm.num_generations",
                    f"the generation batch (training.per_device_batch_size {ctx.per_device_batch_size} x world size "
                    f"{world} (num_nodes x num_devices) x steps per generation {steps} = "
                    f"{generation_batch}) must be divisible by num_generations ({self.num_generations})",
                )
            )
        if ctx.has_eval:
            eval_batch = ctx.per_device_eval_batch_size * world
            if eval_batch % self.num_generations:
                errors.append(
                    (
                        "training.per_device_eval_batch_size",
                        f"the eval batch ({eval_batch}) must be divisible by algorithm.num_generations "
                        f"({self.num_generations})",
                    )
                )
        if self.epsilon_high is not None and self.epsilon_high < self.epsilon:
            errors.append(("algorithm.epsilon_high", f"must be >= algorithm.epsilon ({self.epsilon})"))
        if ctx.max_length < self.max_completion_length:
            errors.append(
                (
                    "algorithm.max_completion_length",
                    f"must be <= data.max_length ({ctx.max_length}), got {self.max_completion_length}",
                )
            )
        return errors


@dataclass(frozen=True)
class AlgorithmSpec:
    """What is trained, never how: engines register builders for it (`training/engines`)."""

    name: str
    params: type[AlgorithmParams]
    data_kind: DataKind
    description: str
    uses_reward_functions: bool = False
    # Sequence-classification head instead of a causal LM (reward modelling).
    model_kind: Literal["causal_lm", "sequence_classification"] = "causal_lm"
    # Metrics the algorithm logs beyond loss / lr / grad_norm (engines map their names onto these).
    metrics: tuple[str, ...] = ()

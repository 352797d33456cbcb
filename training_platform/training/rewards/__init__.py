"""Reward-function registry for online RL (GRPO / RLOO through TRL).

Every reward lives in its own module and registers one factory with `@register_reward`, modelled on verl's
`register_adv_est`:

    class MyParams(RewardParams):
        scale: float = Field(1.0, ge=0)

    @register_reward("my_reward", MyParams, "One line shown in the UI / CLI.")
    def build_my_reward(params: MyParams) -> RewardFn:
        def reward(completions, **kwargs):
            return [params.scale * len(completion_text(c)) for c in completions]
        return reward

`build_reward_function(name, params_dict)` validates the params and returns a callable that TRL calls as
`fn(prompts=..., completions=..., completion_ids=..., **dataset_columns, trainer_state=..., ...)`; it
returns one `float | None` per completion. TRL logs it under `rewards/<__name__>/mean`, so `__name__` is the
registry name.

This package is imported by config validation: keep module-level imports light (no torch, TRL or math_verify).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from training_platform.training.algorithms.base import StrictModel

RewardFn = Callable[..., list[float | None]]


class RewardSection(StrictModel):
    """One entry of a job's `rewards:` (and of a shadow test's reward spec)."""

    name: str = Field(description="A registered reward function (see `tp rewards list`).")
    weight: float = Field(1.0, ge=0, le=1e6)
    params: dict[str, Any] = Field(default_factory=dict)


__all__ = [
    "REWARDS",
    "RewardDefinition",
    "RewardFn",
    "RewardFunction",
    "RewardParams",
    "RewardSection",
    "build_reward_function",
    "completion_text",
    "get_reward",
    "register_reward",
]


class RewardParams(BaseModel):
    """Base class of every reward's params model: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", strict=True, validate_default=True, allow_inf_nan=False)


@dataclass(frozen=True)
class RewardDefinition:
    name: str
    params_model: type[RewardParams]
    factory: Callable[[RewardParams], RewardFn]
    description: str


REWARDS: dict[str, RewardDefinition] = {}


def register_reward(
    name: str, params_model: type[RewardParams], description: str
) -> Callable[[Callable[[Any], RewardFn]], Callable[[Any], RewardFn]]:
    """Decorator registering a reward factory `factory(params) -> reward_fn` under `name`."""
    if not isinstance(params_model, type) or not issubclass(params_model, RewardParams):
        raise TypeError(f"reward {name!r}: params_model must subclass RewardParams, got {params_model!r}")

    def decorator(factory: Callable[[Any], RewardFn]) -> Callable[[Any], RewardFn]:
        if name in REWARDS:
            raise ValueError(f"reward {name!r} is already registered")
        REWARDS[name] = RewardDefinition(name=name, params_model=params_model, factory=factory, description=description)
        return factory

    return decorator


def get_reward(name: str) -> RewardDefinition:
    try:
        return REWARDS[name]
    except KeyError:
        known = ", ".join(sorted(REWARDS)) or "(none)"
        raise KeyError(f"unknown reward function {name!r}; known reward functions: {known}") from None


class RewardFunction:
    """A built reward: callable like a TRL reward function, named after the registry entry.

    Picklable (it pickles as `(name, params)` and is rebuilt from the registry), unlike a bare closure.
    """

    def __init__(self, name: str, params: RewardParams, fn: RewardFn):
        self.name = name
        self.params = params
        self._fn = fn
        self.__name__ = name
        self.__qualname__ = name
        self.__doc__ = get_reward(name).description

    def __call__(self, *args: Any, **kwargs: Any) -> list[float | None]:
        return self._fn(*args, **kwargs)

    def __reduce__(self):
        return (build_reward_function, (self.name, self.params.model_dump()))

    def __repr__(self) -> str:
        return f"RewardFunction({self.name!r}, {self.params!r})"


def build_reward_function(name: str, params: Mapping[str, Any] | RewardParams | None = None) -> RewardFunction:
    """Validate `params` with the reward's params model (pydantic ValidationError if bad) and build it."""
    definition = get_reward(name)
    if isinstance(params, definition.params_model):
        validated = params
    else:
        if isinstance(params, RewardParams):
            params = params.model_dump()
        validated = definition.params_model.model_validate(dict(params or {}))
    return RewardFunction(name, validated, definition.factory(validated))


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multimodal content parts: [{"type": "text", "text": ...}, ...]
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "".join(parts)
    return str(content)


def completion_text(completion: Any) -> str:
    """Text of a completion: a string as is; a conversational completion (list of messages) -> the content of
    the last assistant message (of the last message when no message has role "assistant")."""
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        return _content_text(completion.get("content"))
    if isinstance(completion, list | tuple):
        messages = [m for m in completion if isinstance(m, Mapping)]
        if not messages:
            return "".join(m for m in completion if isinstance(m, str))
        assistant = [m for m in messages if m.get("role") == "assistant"]
        return _content_text((assistant or messages)[-1].get("content"))
    return str(completion)


# Populate the registry. Imported last: these modules import the names defined above.
from training_platform.training.rewards import (  # noqa: E402, F401, I001
    format_reward,
    length_penalty,
    llm_judge,
    math_answer,
    overclarification,
)

"""`length_penalty`: DAPO's soft overlong punishment.

With L_max = max_length and L_cache = buffer:
    0                                    if len <= L_max - L_cache
    (L_max - L_cache - len) / L_cache    if L_max - L_cache < len <= L_max   (from 0 down to -1)
    -1                                   if len > L_max
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field, model_validator

from training_platform.training.rewards import RewardFn, RewardParams, completion_text, register_reward


class LengthPenaltyParams(RewardParams):
    max_length: int = Field(512, ge=1, le=1_048_576, description="Length from which the penalty is -1 (L_max).")
    buffer: int = Field(128, ge=0, le=1_048_576, description="Soft-penalty window below max_length (L_cache).")
    unit: Literal["tokens", "chars"] = Field(
        "tokens",
        description="Count completion tokens (falls back to characters when ids are absent) or chars.",
    )

    @model_validator(mode="after")
    def _buffer_below_max(self) -> LengthPenaltyParams:
        if self.buffer >= self.max_length:
            raise ValueError(f"buffer ({self.buffer}) must be < max_length ({self.max_length})")
        return self


def soft_overlong_penalty(length: int, max_length: int, buffer: int) -> float:
    threshold = max_length - buffer
    if length <= threshold:
        return 0.0
    if length > max_length:
        return -1.0
    return (threshold - length) / buffer  # buffer > 0 here: with buffer 0, threshold == max_length


@register_reward(
    "length_penalty",
    LengthPenaltyParams,
    "DAPO soft overlong punishment: 0 up to max_length - buffer, linear down to -1 at max_length, -1 beyond.",
)
def build_length_penalty(params: LengthPenaltyParams) -> RewardFn:
    def length_penalty(
        completions: list[Any], completion_ids: Sequence[Sequence[int]] | None = None, **kwargs: Any
    ) -> list[float | None]:
        use_ids = params.unit == "tokens" and completion_ids is not None and len(completion_ids) == len(completions)
        all_ids = completion_ids if use_ids else None
        rewards: list[float | None] = []
        for i, completion in enumerate(completions):
            ids = all_ids[i] if all_ids is not None else None
            length = len(ids) if ids is not None else len(completion_text(completion))
            rewards.append(soft_overlong_penalty(length, params.max_length, params.buffer))
        return rewards

    return length_penalty

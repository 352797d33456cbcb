"""`format`: 1.0 when the completion matches a regex (default: a closed <think> block, then an answer)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator

from training_platform.training.rewards import RewardFn, RewardParams, completion_text, register_reward

DEFAULT_PATTERN = r"^<think>.*?</think>\s*\S"


class FormatParams(RewardParams):
    pattern: str = Field(DEFAULT_PATTERN, min_length=1, description="Regular expression, compiled with re.DOTALL.")
    mode: Literal["search", "fullmatch", "match"] = Field(
        "match",
        description="re.search (anywhere), re.match (at the start) or re.fullmatch (whole completion).",
    )

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value, re.DOTALL)
        except re.error as exc:
            raise ValueError(f"invalid regular expression {value!r}: {exc}") from None
        return value


@register_reward(
    "format",
    FormatParams,
    "1.0 if the completion matches a regex (default: a <think>...</think> block, then an answer), else 0.0.",
)
def build_format_reward(params: FormatParams) -> RewardFn:
    regex = re.compile(params.pattern, re.DOTALL)
    matcher = getattr(regex, params.mode)

    def format_reward(completions: list[Any], **kwargs: Any) -> list[float | None]:
        return [1.0 if matcher(completion_text(c)) else 0.0 for c in completions]

    return format_reward

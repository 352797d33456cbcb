"""length_filter: keep rows whose text length (characters, words or tokens of a given tokenizer) is within
[min, max]."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from training_platform.core.userpath import ModelRef
from training_platform.data.operators.base import Filter, OpParams, register_operator


class LengthParams(OpParams):
    unit: Literal["chars", "words", "tokens"] = Field("words", description="What to count.")
    min: int | None = Field(None, ge=0, le=100_000_000, description="Remove rows shorter than this.")
    max: int | None = Field(None, ge=1, le=100_000_000, description="Remove rows longer than this.")
    tokenizer: ModelRef | None = Field(None, description="Tokenizer directory (or hub id) for unit: tokens.")

    @model_validator(mode="after")
    def _check(self) -> LengthParams:
        if self.unit == "tokens" and not self.tokenizer:
            raise ValueError("unit tokens needs a tokenizer")
        if self.min is None and self.max is None:
            raise ValueError("set min, max or both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) must be <= max ({self.max})")
        return self


def measure(text: str, unit: str, tokenizer=None) -> int:
    if unit == "chars":
        return len(text)
    if unit == "words":
        return len(text.split())
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


@register_operator("length_filter", LengthParams)
class LengthFilter(Filter[LengthParams]):
    def check(self, row, text: str) -> str | None:
        p = self.params
        tokenizer = None
        if p.unit == "tokens":
            assert p.tokenizer is not None  # LengthParams._check: unit tokens needs a tokenizer
            tokenizer = self.ctx.tokenizer(p.tokenizer)
        n = measure(text, p.unit, tokenizer)
        if p.min is not None and n < p.min:
            return f"{p.unit}={n} < min {p.min}"
        if p.max is not None and n > p.max:
            return f"{p.unit}={n} > max {p.max}"
        return None

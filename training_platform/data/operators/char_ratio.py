"""char_ratio_filter: remove rows whose characters are mostly symbols or not alphanumeric.

Both ratios are over the non-whitespace characters of the row's text: alphanumeric = str.isalnum (letters and
digits of any script), special = neither alphanumeric nor whitespace (punctuation, symbols, emoji)."""

from __future__ import annotations

from pydantic import Field, model_validator

from training_platform.data.operators.base import Filter, OpParams, register_operator


class CharRatioParams(OpParams):
    min_alnum_ratio: float | None = Field(0.5, ge=0, le=1, description="Remove rows below this alphanumeric ratio.")
    max_special_ratio: float | None = Field(0.4, ge=0, le=1, description="Remove rows above this special ratio.")
    max_digit_ratio: float | None = Field(None, ge=0, le=1, description="Remove rows above this digit ratio.")

    @model_validator(mode="after")
    def _any(self) -> CharRatioParams:
        if self.min_alnum_ratio is None and self.max_special_ratio is None and self.max_digit_ratio is None:
            raise ValueError("set at least one of min_alnum_ratio, max_special_ratio, max_digit_ratio")
        return self


def char_ratios(text: str) -> dict[str, float]:
    visible = [c for c in text if not c.isspace()]
    if not visible:
        return {"alnum_ratio": 0.0, "special_ratio": 0.0, "digit_ratio": 0.0}
    alnum = sum(c.isalnum() for c in visible)
    digits = sum(c.isdigit() for c in visible)
    n = len(visible)
    return {"alnum_ratio": alnum / n, "special_ratio": (n - alnum) / n, "digit_ratio": digits / n}


@register_operator("char_ratio_filter", CharRatioParams)
class CharRatioFilter(Filter[CharRatioParams]):
    def check(self, row, text: str) -> str | None:
        p = self.params
        r = char_ratios(text)
        if p.min_alnum_ratio is not None and r["alnum_ratio"] < p.min_alnum_ratio:
            return f"alnum_ratio={r['alnum_ratio']:.3f} < {p.min_alnum_ratio}"
        if p.max_special_ratio is not None and r["special_ratio"] > p.max_special_ratio:
            return f"special_ratio={r['special_ratio']:.3f} > {p.max_special_ratio}"
        if p.max_digit_ratio is not None and r["digit_ratio"] > p.max_digit_ratio:
            return f"digit_ratio={r['digit_ratio']:.3f} > {p.max_digit_ratio}"
        return None

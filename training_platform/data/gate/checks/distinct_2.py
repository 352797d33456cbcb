"""Gate check `distinct_2`: distinct-2 of the rows' text. The report it goes into: data/gate/base.py."""

from __future__ import annotations

from pydantic import Field

from training_platform.data.gate.base import (
    CheckParams,
    GateContext,
    Outcome,
    at_least,
    register_check,
)


class Distinct2Params(CheckParams):
    min: float = Field(0.6, ge=0, le=1, description="Minimum distinct-2 (unique word bigrams / bigrams).")


@register_check("distinct_2", Distinct2Params, "distinct-2 of the rows' text (the audit report's definition).")
def check_distinct_2(ctx: GateContext, p: Distinct2Params) -> Outcome:
    from training_platform.data.report import _Diversity
    from training_platform.data.text import iter_texts

    def compute():
        diversity = _Diversity((2,))
        for row in ctx.rows():
            for text in iter_texts(row, ctx.fmt):
                diversity.add(text)
        return diversity

    diversity = ctx.cached("diversity2", compute)
    if not diversity.totals[2]:
        return Outcome("skipped", None, f">= {p.min}", "no row has two words: distinct-2 is undefined")
    value = diversity.distinct(2)
    return Outcome(
        "pass" if at_least(value, p.min) else "fail",
        value,
        f">= {p.min}",
        f"{len(diversity.counts[2])} unique of {diversity.totals[2]} word bigrams",
    )

"""Gate check `duplicates`: exact + near duplicate rate. The report it goes into: data/gate/base.py."""

from __future__ import annotations

from pydantic import Field

from training_platform.data.gate.base import (
    CheckParams,
    GateContext,
    Outcome,
    at_most,
    register_check,
)


class DuplicatesParams(CheckParams):
    max_rate: float = Field(0.02, ge=0, le=1, description="Maximum (exact + near duplicate rows) / rows.")
    threshold: float = Field(0.8, gt=0, le=1, description="Jaccard similarity of near duplicates (MinHash).")
    num_perm: int = Field(128, ge=16, le=512)
    ngram: int = Field(5, ge=1, le=32)


@register_check("duplicates", DuplicatesParams, "Exact + near duplicate rate (MinHash LSH, as `tp data dedup`).")
def check_duplicates(ctx: GateContext, p: DuplicatesParams) -> Outcome:
    from training_platform.data.dedup import DedupConfig, find_duplicates

    result = find_duplicates(ctx.texts(), DedupConfig(threshold=p.threshold, num_perm=p.num_perm, ngram=p.ngram))
    if not result.n_rows:
        return Outcome("skipped", None, f"<= {p.max_rate}", "no rows")
    rate = round(result.removed / result.n_rows, 6)
    return Outcome(
        "pass" if at_most(rate, p.max_rate) else "fail",
        rate,
        f"<= {p.max_rate}",
        f"{result.exact_duplicates} exact, {result.near_duplicates} near duplicate row(s) of {result.n_rows}",
        {"clusters": [c[:10] for c in result.clusters[:10]]},
    )

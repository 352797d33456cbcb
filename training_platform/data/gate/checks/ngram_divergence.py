"""Gate check `ngram_divergence`: KL divergence of the word n-gram distribution from a reference set's. The report
it goes into: data/gate/base.py."""

from __future__ import annotations

import math

from pydantic import Field

from training_platform.data.gate.base import (
    CheckParams,
    GateContext,
    Outcome,
    at_least,
    register_check,
)


class DivergenceParams(CheckParams):
    n: int = Field(3, ge=1, le=8, description="Words per n-gram.")
    min_kl: float = Field(0.15, ge=0, le=1000, description="Minimum KL(dataset || reference) in bits.")
    smoothing: float = Field(0.01, gt=0, le=10, description="Additive smoothing of the reference's counts.")


def ngram_counts(texts, n: int):
    from training_platform.data.report import _Diversity

    diversity = _Diversity((n,))
    for text in texts:
        diversity.add(text)
    return diversity.counts[n], diversity.totals[n]


def kl_divergence_bits(p_counts, p_total: int, q_counts, q_total: int, smoothing: float) -> float:
    """KL(P || Q) in bits, Q additively smoothed over the union of both supports."""
    vocab = len(set(p_counts) | set(q_counts))
    denom = q_total + smoothing * vocab
    kl = 0.0
    for gram, count in p_counts.items():
        p = count / p_total
        q = (q_counts.get(gram, 0) + smoothing) / denom
        kl += p * math.log2(p / q)
    return max(0.0, kl)


@register_check(
    "ngram_divergence",
    DivergenceParams,
    "KL divergence of the word n-gram distribution from a reference set's (needs a reference).",
)
def check_ngram_divergence(ctx: GateContext, p: DivergenceParams) -> Outcome:
    from training_platform.data.formats import detect_format
    from training_platform.data.io import iter_rows
    from training_platform.data.text import iter_texts

    threshold = f">= {p.min_kl}"
    reference = ctx.reference
    if reference is None:
        return Outcome("skipped", None, threshold, "no reference set given")
    counts, total = ngram_counts((t for row in ctx.rows() for t in iter_texts(row, ctx.fmt)), p.n)

    def reference_texts():
        fmt = None
        for row in iter_rows(reference):
            if fmt is None and isinstance(row, dict):
                fmt = detect_format(row)
            yield from iter_texts(row, fmt)

    ref_counts, ref_total = ngram_counts(reference_texts(), p.n)
    if not total or not ref_total:
        which = "the dataset" if not total else "the reference"
        return Outcome("skipped", None, threshold, f"{which} has no {p.n}-grams")
    value = round(kl_divergence_bits(counts, total, ref_counts, ref_total, p.smoothing), 6)
    return Outcome(
        "pass" if at_least(value, p.min_kl) else "fail",
        value,
        threshold,
        f"KL over {total} dataset and {ref_total} reference {p.n}-grams (bits)",
    )

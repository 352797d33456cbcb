"""Gate check `length_bounds`: tokens per text field inside bounds. The report it goes into: data/gate/base.py."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

from training_platform.data.gate.base import (
    CheckParams,
    GateContext,
    Outcome,
    at_most,
    register_check,
)


class LengthParams(CheckParams):
    min_tokens: int = Field(1, ge=0, le=10_000_000, description="Minimum tokens per text field.")
    max_tokens: int = Field(4096, ge=1, le=10_000_000, description="Maximum tokens per text field.")
    max_outside_share: float = Field(0.01, ge=0, le=1, description="Maximum share of rows with a field outside.")
    fields: list[Annotated[str, StringConstraints(min_length=1, max_length=128)]] | None = Field(
        None, max_length=64, description="Top-level fields to check (default: the format's text fields)."
    )


@register_check(
    "length_bounds",
    LengthParams,
    "Tokens per text field (whitespace words unless a tokenizer is given) inside [min, max].",
)
def check_length_bounds(ctx: GateContext, p: LengthParams) -> Outcome:
    from training_platform.data.text import iter_texts

    threshold = f"share outside [{p.min_tokens}, {p.max_tokens}] <= {p.max_outside_share}"
    if p.min_tokens > p.max_tokens:
        return Outcome("fail", None, threshold, "min_tokens > max_tokens")
    outside, rows = 0, 0
    shortest: int | None = None
    longest: int | None = None
    examples: list[int] = []  # indices of the first rows outside the bounds
    batch: list[tuple[int, list[str]]] = []

    def flush():
        nonlocal outside, shortest, longest
        flat = [t for _, texts in batch for t in texts]
        counts = ctx.token_counts(flat) if flat else []
        pos = 0
        for index, texts in batch:
            lengths = counts[pos : pos + len(texts)]
            pos += len(texts)
            if lengths:
                shortest = min(lengths) if shortest is None else min(shortest, min(lengths))
                longest = max(lengths) if longest is None else max(longest, max(lengths))
            if not lengths or any(n < p.min_tokens or n > p.max_tokens for n in lengths):
                outside += 1
                if len(examples) < 10:
                    examples.append(index)
        batch.clear()

    for index, row in enumerate(ctx.rows()):
        rows += 1
        batch.append((index, list(iter_texts(row, ctx.fmt, p.fields))))
        if len(batch) >= 256:
            flush()
    flush()
    if not rows:
        return Outcome("skipped", None, threshold, "no rows")
    share = round(outside / rows, 6)
    return Outcome(
        "pass" if at_most(share, p.max_outside_share) else "fail",
        share,
        threshold,
        f"{outside} of {rows} row(s) have a field outside the bounds (or no text); {ctx.token_unit['unit']}"
        f" per field: min {shortest}, max {longest}",
        {"example_rows": examples},
    )

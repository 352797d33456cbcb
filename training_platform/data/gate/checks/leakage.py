"""Gate check `leakage`: rows leaked into the eval sets (n-gram overlap or MinHash similarity). The report it goes
into: data/gate/base.py."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from training_platform.data.gate.base import (
    CheckParams,
    GateContext,
    Outcome,
    at_least,
    register_check,
)


class LeakageParams(CheckParams):
    ngram: int = Field(13, ge=1, le=64, description="Words per n-gram of the overlap test.")
    min_tokens: int = Field(8, ge=1, le=1_000_000)
    min_matches: int = Field(1, ge=1, le=1_000_000, description="Overlapping n-grams that make a row leaked.")
    minhash_threshold: float = Field(
        0.85, gt=0, le=1, description="MinHash similarity with an eval row that makes a row leaked."
    )
    num_perm: int = Field(128, ge=16, le=512)
    shingle: int = Field(5, ge=1, le=32, description="Words per MinHash shingle.")
    max_leaked: int = Field(0, ge=0, le=100_000_000, description="Leaked rows allowed.")


def minhash_leaks(ctx: GateContext, p: LeakageParams) -> dict[int, dict[str, Any]]:
    """Training rows whose estimated Jaccard similarity with an eval row is >= the threshold (LSH candidates,
    verified on the signatures): row -> {eval_set, eval_row, similarity}."""
    import numpy as np

    from training_platform.data.dedup import MinHasher, lsh_params
    from training_platform.data.formats import detect_format
    from training_platform.data.io import iter_rows
    from training_platform.data.text import row_text

    hasher = MinHasher(p.num_perm, p.shingle)
    bands, rows_per_band = lsh_params(p.minhash_threshold, p.num_perm)
    buckets: dict[tuple[int, bytes], list[int]] = {}
    owners: list[tuple[str, int]] = []
    signatures: list[np.ndarray] = []

    def add_batch(texts: list[str], refs: list[tuple[str, int]]):
        sigs, counts = hasher.signatures(texts)
        for sig, count, ref in zip(sigs, counts, refs, strict=True):
            if not count:
                continue
            owner = len(owners)
            owners.append(ref)
            signatures.append(sig)
            for b in range(bands):
                buckets.setdefault((b, sig[b * rows_per_band : (b + 1) * rows_per_band].tobytes()), []).append(owner)

    for eval_path in ctx.eval_sets:
        fmt, texts, refs = None, [], []
        for i, row in enumerate(iter_rows(eval_path)):
            if fmt is None and isinstance(row, dict):
                fmt = detect_format(row)
            texts.append(row_text(row, fmt))
            refs.append((eval_path.stem, i))
            if len(texts) >= 512:
                add_batch(texts, refs)
                texts, refs = [], []
        if texts:
            add_batch(texts, refs)
    found: dict[int, dict[str, Any]] = {}
    if not owners:
        return found
    table = np.stack(signatures)

    def check_batch(texts: list[str], start: int):
        sigs, counts = hasher.signatures(texts)
        for j, (sig, count) in enumerate(zip(sigs, counts, strict=True)):
            if not count:
                continue
            candidates: set[int] = set()
            for b in range(bands):
                candidates.update(buckets.get((b, sig[b * rows_per_band : (b + 1) * rows_per_band].tobytes()), ()))
            if not candidates:
                continue
            ids = np.fromiter(candidates, dtype=np.int64)
            sims = (table[ids] == sig).mean(axis=1)
            best = int(np.argmax(sims))
            if at_least(float(sims[best]), p.minhash_threshold):
                eval_set, eval_row = owners[int(ids[best])]
                found[start + j] = {
                    "eval_set": eval_set,
                    "eval_row": eval_row,
                    "similarity": round(float(sims[best]), 4),
                }

    batch: list[str] = []
    start = 0
    for text in ctx.texts():
        batch.append(text)
        if len(batch) >= 512:
            check_batch(batch, start)
            start += len(batch)
            batch = []
    if batch:
        check_batch(batch, start)
    return found


@register_check(
    "leakage",
    LeakageParams,
    "Rows leaked from the chosen eval sets: n-gram overlap or MinHash similarity (needs eval sets).",
)
def check_leakage(ctx: GateContext, p: LeakageParams) -> Outcome:
    from training_platform.data.contamination import build_index, find_contamination

    threshold = f"leaked rows <= {p.max_leaked} (n-gram overlap, or MinHash similarity >= {p.minhash_threshold})"
    if not ctx.eval_sets:
        return Outcome("skipped", None, threshold, "no eval sets given")
    index = build_index(ctx.eval_sets, n=p.ngram, min_tokens=p.min_tokens)
    by_ngram = {f["row"]: f for f in find_contamination(ctx.rows(), index, fmt=ctx.fmt, min_matches=p.min_matches)}
    by_minhash = minhash_leaks(ctx, p)
    leaked = sorted(set(by_ngram) | set(by_minhash))
    examples = []
    for row in leaked[:10]:
        item: dict[str, Any] = {"row": row}
        if row in by_ngram:
            f = by_ngram[row]
            item["ngram"] = {
                "eval_set": f["eval_set"],
                "eval_row": f["eval_row"],
                "matched_ngrams": f["matched_ngrams"],
                "example": f["example"][:200],
            }
        if row in by_minhash:
            item["minhash"] = by_minhash[row]
        examples.append(item)
    n = len(leaked)
    return Outcome(
        "pass" if n <= p.max_leaked else "fail",
        n,
        threshold,
        f"{len(by_ngram)} row(s) by n-gram overlap, {len(by_minhash)} by MinHash similarity, {n} in all, "
        f"against {', '.join(s.name for s in index.sets)}",
        {"leaked_rows": examples, "eval_sets": [{"name": s.name, "rows": s.rows} for s in index.sets]},
    )

"""repetition_filter: Gopher-style repetition removal (Rae et al. 2021, "Scaling Language Models", table A1).

Fractions measured on the row's text (fields joined by newlines); a row is removed when any exceeds its limit:
- duplicate lines / paragraphs: the fraction of lines (paragraphs) that repeat an earlier one, and the fraction of
  characters in such repeats;
- top n-gram character fraction (n = 2, 3, 4): characters covered by the most frequent word n-gram;
- duplicate n-gram character fraction (n = 5..10): characters in word n-grams that repeat an earlier one.
Texts with fewer than `min_words` words are not judged on n-grams (the ratios are noise on short replies)."""

from __future__ import annotations

import re
from collections import Counter

from pydantic import Field

from training_platform.data.operators.base import Filter, OpParams, register_operator

_PARAGRAPHS = re.compile(r"\n{2,}")
_LINES = re.compile(r"\n+")


class RepetitionParams(OpParams):
    dup_line_frac: float | None = Field(0.30, ge=0, le=1)
    dup_para_frac: float | None = Field(0.30, ge=0, le=1)
    dup_line_char_frac: float | None = Field(0.20, ge=0, le=1)
    dup_para_char_frac: float | None = Field(0.20, ge=0, le=1)
    top_ngram_char_frac: dict[int, float] = Field(default_factory=lambda: {2: 0.20, 3: 0.18, 4: 0.16})
    dup_ngram_char_frac: dict[int, float] = Field(
        default_factory=lambda: {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10}
    )
    min_words: int = Field(20, ge=0, le=1_000_000, description="Skip the n-gram checks below this many words.")


def _duplicates(items: list[str]) -> tuple[int, int]:
    seen: set[str] = set()
    count = chars = 0
    for item in items:
        if item in seen:
            count += 1
            chars += len(item)
        else:
            seen.add(item)
    return count, chars


def top_ngram_char_fraction(words: list[str], n: int, total_chars: int) -> float:
    if len(words) < n or not total_chars:
        return 0.0
    counts = Counter(" ".join(words[i : i + n]) for i in range(len(words) - n + 1))
    gram, count = counts.most_common(1)[0]
    return len(gram) * count / total_chars if count > 1 else 0.0


def dup_ngram_char_fraction(words: list[str], n: int, total_chars: int) -> float:
    """Characters in n-grams that repeat an earlier n-gram (a repeat skips its n words, so overlapping repeats are
    not counted twice), over the text's characters."""
    if len(words) < n or not total_chars:
        return 0.0
    seen: set[tuple[str, ...]] = set()
    repeated = i = 0
    while i <= len(words) - n:
        gram = tuple(words[i : i + n])
        if gram in seen:
            repeated += sum(len(w) for w in gram)
            i += n
        else:
            seen.add(gram)
            i += 1
    return repeated / total_chars


def repetition_stats(text: str, params: RepetitionParams | None = None) -> dict[str, float]:
    params = params or RepetitionParams()
    stats: dict[str, float] = {}
    total = len(text) or 1
    paragraphs = _PARAGRAPHS.split(text.strip())
    dup, chars = _duplicates(paragraphs)
    stats["dup_para_frac"], stats["dup_para_char_frac"] = dup / len(paragraphs), chars / total
    lines = [line for line in _LINES.split(text.strip())]
    dup, chars = _duplicates(lines)
    stats["dup_line_frac"], stats["dup_line_char_frac"] = dup / len(lines), chars / total
    words = text.split()
    if len(words) >= params.min_words:
        for n in params.top_ngram_char_frac:
            stats[f"top_{n}gram_char_frac"] = top_ngram_char_fraction(words, n, total)
        for n in params.dup_ngram_char_frac:
            stats[f"dup_{n}gram_char_frac"] = dup_ngram_char_fraction(words, n, total)
    return stats


@register_operator("repetition_filter", RepetitionParams)
class RepetitionFilter(Filter[RepetitionParams]):
    def check(self, row, text: str) -> str | None:
        p = self.params
        if not text.strip():
            return None
        stats = repetition_stats(text, p)
        limits = {
            "dup_para_frac": p.dup_para_frac,
            "dup_para_char_frac": p.dup_para_char_frac,
            "dup_line_frac": p.dup_line_frac,
            "dup_line_char_frac": p.dup_line_char_frac,
        }
        limits.update({f"top_{n}gram_char_frac": v for n, v in p.top_ngram_char_frac.items()})
        limits.update({f"dup_{n}gram_char_frac": v for n, v in p.dup_ngram_char_frac.items()})
        for name, limit in limits.items():
            if limit is not None and name in stats and stats[name] > limit:
                return f"{name}={stats[name]:.3f} > {limit}"
        return None

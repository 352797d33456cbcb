"""Synthetic corpora with planted near-duplicates at known Jaccard similarities (tests and the dedup benchmark), and
pairwise precision/recall of predicted duplicate clusters against them.

Documents are random sequences of digit-free made-up words (Zipf-like vocabulary). A planted variant of a base
document replaces words with words that occur nowhere else so that exactly m of its S shingles (word n-grams)
change: m // n substitutions exactly n words apart (n shingles each) plus one near the start that touches only the
remaining m % n shingles. Its Jaccard similarity to the base is then (S - m) / (S + m); m is rounded so that
duplicates stay at or just above their target similarity and hard negatives at or just below theirs. The true
similarity of every planted pair is then measured exactly on the shingle sets (`MinHasher.shingle_hashes`), and the
ground-truth groups are the connected components of pairs with measured Jaccard >= `dup_threshold` (exact copies
and copies that differ only in case/punctuation/whitespace have Jaccard 1).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class PlantedCorpus:
    texts: list[str]
    groups: list[list[int]]  # true duplicate groups (size >= 2), row indices
    pairs: list[dict[str, Any]] = field(default_factory=list)  # planted pairs: a, b, target, jaccard, kind

    def group_of(self) -> np.ndarray:
        """Per row: its true group id, or a unique negative id for rows in no group."""
        labels = -1 - np.arange(len(self.texts), dtype=np.int64)
        for gid, members in enumerate(self.groups):
            labels[members] = gid
        return labels


_CONSONANTS = "bcdfghjklmnprstvz"
_VOWELS = "aeiou"


def _word(i: int) -> str:
    """A pronounceable, digit-free word for index i (three consonant-vowel syllables)."""
    out = []
    for _ in range(3):
        i, s = divmod(i, len(_CONSONANTS) * len(_VOWELS))
        out.append(_CONSONANTS[s // len(_VOWELS)] + _VOWELS[s % len(_VOWELS)])
    return "".join(out)


def _edit_positions(rng: np.random.Generator, length: int, killed: int, n: int) -> list[int]:
    """Word positions whose substitution changes exactly `killed` shingles (for a doc with distinct shingles):
    killed // n substitutions exactly n apart (n shingles each) and, for the remainder r, one substitution at word
    r - 1 (it touches only the first r shingles)."""
    full, rest = divmod(killed, n)
    positions = [rest - 1] if rest else []
    first = n + rest - 1 + int(rng.integers(0, n))  # clear of the remainder edit's shingles
    slots = max(0, (length - n - first) // n + 1)  # q <= length - n: every touched shingle exists
    chosen = rng.choice(slots, size=min(full, slots), replace=False) if slots else []
    return positions + sorted(first + int(s) * n for s in chosen)


def _variant(rng, words, target, n, vocab, probs, *, at_least: bool) -> list[str]:
    shingles = max(1, len(words) - n + 1)
    exact = shingles * (1 - target) / (1 + target)  # J = (S - m) / (S + m)
    killed = math.floor(exact + 1e-9) if at_least else math.ceil(exact - 1e-9)
    out = list(words)
    for pos in _edit_positions(rng, len(words), killed, n):
        out[pos] = "x" + vocab[int(rng.integers(len(vocab)))]  # a word that never occurs in base documents
    return out


def _surface_variant(rng: np.random.Generator, words: list[str]) -> str:
    """Same shingles, different bytes: capitalised words, punctuation, extra spaces."""
    text = " ".join(w.capitalize() if rng.random() < 0.2 else w for w in words)
    return text.replace(" ", ",  ", 3) + "!"


def planted_corpus(
    n_rows: int,
    *,
    seed: int = 0,
    ngram: int = 5,
    dup_threshold: float = 0.8,
    dup_fraction: float = 0.25,
    near_similarities: tuple[float, ...] = (0.8, 0.85, 0.9, 0.95),
    negative_similarities: tuple[float, ...] = (0.3, 0.45, 0.6),
    negative_fraction: float = 0.1,
    min_words: int = 60,
    max_words: int = 200,
    vocab_size: int = 30_000,
) -> PlantedCorpus:
    """`n_rows` texts; about `dup_fraction` of them are planted duplicates of another row (near duplicates at
    `near_similarities`, exact copies and surface variants) and `negative_fraction` are hard negatives (similar
    to a base document, but below the threshold). Rows are shuffled."""
    from training_platform.data.dedup import MinHasher, jaccard

    rng = np.random.default_rng(seed)
    vocab = [_word(i) for i in range(vocab_size)]  # digit-free: number normalisation leaves them alone
    ranks = np.arange(1, vocab_size + 1, dtype=np.float64)
    probs = ranks**-0.8
    probs /= probs.sum()
    n_dups = int(n_rows * dup_fraction)
    n_negs = int(n_rows * negative_fraction)
    n_base = n_rows - n_dups - n_negs
    if n_base < 1:
        raise ValueError("too many planted rows for n_rows")
    lengths = rng.integers(min_words, max_words + 1, size=n_base)
    all_words = np.array(vocab)[rng.choice(vocab_size, size=int(lengths.sum()), p=probs)].tolist()
    cuts = np.concatenate(([0], np.cumsum(lengths))).tolist()
    bases = [all_words[cuts[i] : cuts[i + 1]] for i in range(n_base)]
    docs: list[tuple[str, int, str, float | None]] = [(" ".join(w), i, "base", None) for i, w in enumerate(bases)]
    # duplicates: spread over bases, a few bases get several (clusters of 3-4)
    kinds = ["near"] * 8 + ["exact", "surface"]
    for _ in range(n_dups):
        family = int(rng.integers(n_base)) if rng.random() < 0.7 else int(rng.integers(max(1, n_base // 20)))
        kind = kinds[int(rng.integers(len(kinds)))]
        if kind == "exact":
            docs.append((" ".join(bases[family]), family, kind, 1.0))
        elif kind == "surface":
            docs.append((_surface_variant(rng, bases[family]), family, kind, 1.0))
        else:
            target = float(near_similarities[int(rng.integers(len(near_similarities)))])
            words = _variant(rng, bases[family], target, ngram, vocab, probs, at_least=True)
            docs.append((" ".join(words), family, kind, target))
    # hard negatives: bases that no duplicate uses, so they stay outside every group
    used = {family for _, family, kind, _ in docs if kind != "base"}
    free = [i for i in range(n_base) if i not in used]
    for j in range(n_negs):
        family = free[j % len(free)] if free else int(rng.integers(n_base))
        target = float(negative_similarities[int(rng.integers(len(negative_similarities)))])
        words = _variant(rng, bases[family], target, ngram, vocab, probs, at_least=False)
        docs.append((" ".join(words), family, "negative", target))

    order = rng.permutation(len(docs))
    texts = [docs[i][0] for i in order]
    position = np.empty(len(docs), dtype=np.int64)
    position[order] = np.arange(len(docs))

    # measure every pair within a family exactly; groups = components of pairs >= dup_threshold
    hasher = MinHasher(num_perm=2, ngram=ngram)
    families: dict[int, list[int]] = {}
    for original, (_, family, _, _) in enumerate(docs):
        families.setdefault(family, []).append(original)
    parent = list(range(len(docs)))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    pairs = []
    for members in families.values():
        if len(members) < 2:
            continue
        shingles = {m: hasher.shingle_hashes(docs[m][0]) for m in members}
        for i, a in enumerate(members):
            for b in members[i + 1 :]:
                sim = jaccard(shingles[a], shingles[b])
                if docs[a][2] == "base" or docs[b][2] == "base":
                    other = b if docs[a][2] == "base" else a
                    pairs.append(
                        {
                            "a": int(position[a]),
                            "b": int(position[b]),
                            "kind": docs[other][2],
                            "target": docs[other][3],
                            "jaccard": round(sim, 4),
                        }
                    )
                if sim >= dup_threshold:
                    parent[find(a)] = find(b)
    components: dict[int, list[int]] = {}
    for original in range(len(docs)):
        components.setdefault(find(original), []).append(int(position[original]))
    groups = sorted(sorted(c) for c in components.values() if len(c) >= 2)
    return PlantedCorpus(texts=texts, groups=groups, pairs=pairs)


def pairwise_scores(
    predicted: list[list[int]], truth: PlantedCorpus | list[list[int]], n_rows: int | None = None
) -> dict[str, float]:
    """Pairwise precision/recall: a pair of rows is a predicted duplicate when it shares a predicted cluster and a
    true duplicate when it shares a true group."""
    groups = truth.groups if isinstance(truth, PlantedCorpus) else truth
    n = (
        n_rows
        if n_rows is not None
        else (
            len(truth.texts)
            if isinstance(truth, PlantedCorpus)
            else 1 + max((i for g in [*groups, *predicted] for i in g), default=0)
        )
    )
    labels = -1 - np.arange(n, dtype=np.int64)
    for gid, members in enumerate(groups):
        labels[members] = gid
    pred_pairs = sum(len(c) * (len(c) - 1) // 2 for c in predicted)
    true_pairs = sum(len(g) * (len(g) - 1) // 2 for g in groups)
    hits = 0
    for cluster in predicted:
        for count in Counter(labels[cluster].tolist()).values():
            hits += count * (count - 1) // 2
    precision = hits / pred_pairs if pred_pairs else 1.0
    recall = hits / true_pairs if true_pairs else 1.0
    return {
        "precision": precision,
        "recall": recall,
        "predicted_pairs": pred_pairs,
        "true_pairs": true_pairs,
        "correct_pairs": hits,
    }


def planted_pair_recall(predicted: list[list[int]], corpus: PlantedCorpus, n_rows: int | None = None) -> dict[str, Any]:
    """Share of planted (base, duplicate) pairs found in one predicted cluster, by similarity bucket; and the share of
    hard negatives wrongly put with their base."""
    n = n_rows or len(corpus.texts)
    cluster_of = np.full(n, -1, dtype=np.int64)
    for cid, members in enumerate(predicted):
        cluster_of[members] = cid
    buckets: dict[str, list[int]] = {}
    for pair in corpus.pairs:
        together = cluster_of[pair["a"]] >= 0 and cluster_of[pair["a"]] == cluster_of[pair["b"]]
        label = f"{pair['kind']}@{pair['target']}" if pair["kind"] in ("near", "negative") else pair["kind"]
        found, total = buckets.get(label, [0, 0])
        buckets[label] = [found + int(together), total + 1]
    return {label: {"found": f, "total": t, "rate": round(f / t, 4)} for label, (f, t) in sorted(buckets.items())}

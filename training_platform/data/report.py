"""Audit report of a dataset file: length and turn distributions, diversity, difficulty buckets, duplicates and
contamination. JSON the UI can chart: every distribution carries summary stats and a histogram (edges + counts).

Definitions (also written into every report under `definitions`):

- distinct-n: the number of unique word n-grams divided by the total number of word n-grams, over the whole dataset.
  Words are the lowercased whitespace-separated tokens of each text field of a row (punctuation stays attached);
  n-grams do not cross field or row boundaries. 1.0 means no n-gram repeats anywhere.
- n-gram entropy: Shannon entropy (bits) of the dataset's word n-gram frequency distribution (same tokens).
- difficulty: per row, features `words` (all text), `response_words` (the answer/assistant part), `numeric_steps`
  (arithmetic operations between numbers, like `3 + 4` or `= 7`, in the whole row), `numbers` (numeric tokens) and
  `turns`. The difficulty score is the mean of the row's percentile ranks on the features that vary within the
  dataset (ties share their average rank), in (0, 1]; buckets: easy < 1/3 <= medium < 2/3 <= hard (cut-offs
  configurable). `resample_to_mix` draws rows to a target easy/medium/hard mix.

`audit_file` runs its per-row work (lengths, turns, difficulty features, token lengths, n-gram counts) as
`AuditStage` on an executor (data/executors/: local, or Ray Data stages), block by block; what needs every row
(ranks, buckets, distinct-n and entropy over the merged counts) is computed in the driver from the stages' compact
per-row figures. The duplicate search runs on the executor too; the contamination check runs in the driver.
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from xxhash import xxh3_64_intdigest

from training_platform.core.files import write_json
from training_platform.data.formats import DatasetError, RowError, detect_format, validate_row
from training_platform.data.io import Record, RowWriter, iter_records
from training_platform.data.text import iter_texts, response_text, row_text, turn_count, whitespace_tokens

if TYPE_CHECKING:
    from training_platform.data.executors import Executor

DISTINCT_N_DEFINITION = (
    "distinct-n = unique word n-grams / total word n-grams over the whole dataset; words are the lowercased "
    "whitespace-separated tokens of each text field of a row (punctuation stays attached); n-grams do not cross "
    "field or row boundaries"
)
ENTROPY_DEFINITION = "Shannon entropy in bits of the dataset's word n-gram frequency distribution (same tokens)"
DIFFICULTY_DEFINITION = (
    "score = mean percentile rank (ties averaged) within the dataset of those of words, response_words, "
    "numeric_steps, numbers and turns that vary, in (0, 1]; easy < t1 <= medium < t2 <= hard"
)
DIFFICULTY_FEATURES = ("words", "response_words", "numeric_steps", "numbers", "turns")
BUCKETS = ("easy", "medium", "hard")
_NUMERIC_STEP = re.compile(r"\d\s*[-+*/×÷^]\s*\(?\s*-?\d|=\s*-?\d")
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:[.,]\d+)?")


def distribution(values: Sequence[float] | np.ndarray, *, bins: int = 20, integer: bool = True) -> dict[str, Any]:
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        return {"count": 0}
    lo, hi = float(arr.min()), float(arr.max())
    if integer:
        width = max(1, math.ceil((hi - lo + 1) / bins))
        edges = np.arange(lo, hi + width + 1, width)
    else:
        edges = np.linspace(lo, hi if hi > lo else lo + 1, bins + 1)
    counts, edges = np.histogram(arr, bins=edges)
    return {
        "count": int(arr.size),
        "mean": round(float(arr.mean()), 4),
        "std": round(float(arr.std()), 4),
        "min": lo,
        "p10": float(np.percentile(arr, 10)),
        "p50": float(np.percentile(arr, 50)),
        "p90": float(np.percentile(arr, 90)),
        "p99": float(np.percentile(arr, 99)),
        "max": hi,
        "histogram": {"edges": [round(float(e), 4) for e in edges], "counts": counts.tolist()},
    }


def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks, ties get the mean of their ranks (like scipy.stats.rankdata)."""
    values = np.asarray(values)
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    new = np.concatenate(([True], sorted_values[1:] != sorted_values[:-1]))
    dense = np.cumsum(new) - 1
    counts = np.bincount(dense)
    ends = np.cumsum(counts)
    avg = ends - (counts - 1) / 2.0
    ranks = np.empty(len(values), dtype=np.float64)
    ranks[order] = avg[dense]
    return ranks


def difficulty_features(row: Any, fmt: str | None) -> dict[str, int]:
    text = row_text(row, fmt)
    return {
        "words": len(text.split()),
        "response_words": len(response_text(row, fmt).split()),
        "numeric_steps": len(_NUMERIC_STEP.findall(text)),
        "numbers": len(_NUMBER.findall(text)),
        "turns": turn_count(row, fmt),
    }


def difficulty_scores(features: dict[str, np.ndarray]) -> np.ndarray:
    n = len(next(iter(features.values()))) if features else 0
    if n == 0:
        return np.zeros(0)
    varying = [name for name in DIFFICULTY_FEATURES if np.ptp(features[name]) > 0]
    if not varying:  # nothing tells rows apart: all in the middle
        return np.full(n, 0.5)
    return np.mean([average_ranks(features[name]) / n for name in varying], axis=0)


def bucket_of(scores: np.ndarray, thresholds: tuple[float, float] = (1 / 3, 2 / 3)) -> np.ndarray:
    """0 easy, 1 medium, 2 hard."""
    t1, t2 = thresholds
    return np.where(scores < t1, 0, np.where(scores < t2, 1, 2))


class _Diversity:
    """Counts of hashed word n-grams (exact; memory grows with the number of distinct n-grams), in the order the
    n-grams first appear. The hash (xxh3 of the n-gram's words joined by a space: words hold no whitespace) is the
    same in every process, so the counts of blocks counted apart merge (`update`) into the whole file's."""

    def __init__(self, ns: tuple[int, ...] = (1, 2)):
        self.counts: dict[int, Counter[int]] = {n: Counter() for n in ns}  # n -> hashed n-gram -> count
        self.totals = dict.fromkeys(ns, 0)

    def add(self, text: str) -> None:
        tokens = whitespace_tokens(text)
        for n, counter in self.counts.items():
            if len(tokens) < n:
                continue
            grams = tokens if n == 1 else map(" ".join, zip(*(tokens[i:] for i in range(n)), strict=False))
            before = self.totals[n]
            counter.update(map(xxh3_64_intdigest, map(str.encode, grams)))
            self.totals[n] = before + len(tokens) - n + 1

    def update(self, other: _Diversity) -> None:
        """Add the counts of texts that come after this one's (first appearances keep their order)."""
        for n, counter in self.counts.items():
            counter.update(other.counts[n])
            self.totals[n] += other.totals[n]

    def distinct(self, n: int) -> float:
        return round(len(self.counts[n]) / self.totals[n], 6) if self.totals[n] else 0.0

    def entropy(self, n: int) -> float:
        total = self.totals[n]
        if not total:
            return 0.0
        p = np.fromiter(self.counts[n].values(), dtype=np.float64) / total
        return round(float(-(p * np.log2(p)).sum()), 4)


def _rows(path: str | Path) -> Iterator[Any]:
    for record in iter_records(path):
        if record.error is not None:
            raise DatasetError([record.error])
        yield record.row


def _detect(path: str | Path, fmt: str | None) -> str | None:
    if fmt is not None:
        return fmt
    for row in _rows(path):
        if isinstance(row, dict):
            return detect_format(row)
    return None


_TOKENIZERS: dict[str, Any] = {}  # AuditStage's tokenizers by path, loaded once per process
_VALUES = ("chars", "words", "turns", *DIFFICULTY_FEATURES, "tokens")  # AuditStage's columns, one row per row


@dataclass
class AuditStage:
    """One block's per-row figures (`_VALUES`: text length in chars and words, turns, the difficulty features and,
    with a tokenizer, the token length of the text a trainer would see) and its n-gram counts. A tokenizer given as
    a path is loaded once per process that runs the stage."""

    fmt: str | None
    fields: list[str] | None = None
    tokenizer: Any = None  # a tokenizer directory / hub id, or a tokenizer object

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_tokenizer"}

    def loaded_tokenizer(self) -> Any:
        if "_tokenizer" not in self.__dict__:
            tokenizer = self.tokenizer
            if isinstance(tokenizer, str | Path):  # each Ray task gets its own copy of the stage: cached per process
                tokenizer = _TOKENIZERS.get(str(tokenizer))
                if tokenizer is None:
                    from training_platform.data.tokenizer import load_tokenizer

                    tokenizer = _TOKENIZERS[str(self.tokenizer)] = load_tokenizer(self.tokenizer)
            self.__dict__["_tokenizer"] = tokenizer
        return self.__dict__["_tokenizer"]

    def __call__(self, records: Sequence[Record]) -> dict[str, Any]:
        fmt, fields = self.fmt, self.fields
        tokenizer = self.loaded_tokenizer()
        values = np.zeros((len(records), len(_VALUES)), dtype=np.int64)
        diversity = _Diversity()
        rendered: list[str] = []
        for i, record in enumerate(records):
            if record.error is not None:
                raise DatasetError([record.error])
            row = record.row
            text = row_text(row, fmt, fields)
            features = difficulty_features(row, fmt)
            values[i, :-1] = (
                len(text),
                len(text.split()),
                turn_count(row, fmt),
                *(features[name] for name in DIFFICULTY_FEATURES),
            )
            for field_text in iter_texts(row, fmt, fields):
                diversity.add(field_text)
            if tokenizer is not None:
                if fmt is not None and isinstance(row, dict) and not validate_row(fmt, row):
                    from training_platform.data.convert import render_row

                    text = render_row(row, fmt, tokenizer)
                rendered.append(text)
        for start in range(0, len(rendered), 256):
            ids = tokenizer(rendered[start : start + 256], add_special_tokens=False)["input_ids"]
            values[start : start + len(ids), -1] = [len(x) for x in ids]
        return {"values": values, "diversity": diversity}


def audit_file(
    path: str | Path,
    *,
    eval_sets: list[str | Path] | None = None,
    tokenizer: Any = None,
    fmt: str | None = None,
    fields: list[str] | None = None,
    ngram: int = 13,
    min_tokens: int = 8,
    min_matches: int = 1,
    dedup: Any = True,
    thresholds: tuple[float, float] = (1 / 3, 2 / 3),
    bins: int = 20,
    report_path: str | Path | None = None,
    executor: Executor | None = None,
) -> dict[str, Any]:
    """The audit report (see the module docstring). `tokenizer`: a tokenizer object or a local path, for token
    lengths of the text a trainer would see (chat template for chat rows). `dedup`: True, False or a DedupConfig.
    The per-row figures (and token lengths) are computed block by block on `executor` (default: local, in this
    process) as is the duplicate search; ranks, buckets and diversity over all rows are computed here, as is the
    contamination check."""
    from training_platform.core.files import sha256_file
    from training_platform.data.executors import get_executor

    t0 = time.perf_counter()
    executor = executor or get_executor("local")
    fmt = _detect(path, fmt)
    stage = AuditStage(fmt, fields, tokenizer)
    if isinstance(tokenizer, str | Path):
        from training_platform.data.tokenizer import load_tokenizer, local_tokenizer_dir

        local = local_tokenizer_dir(tokenizer)  # absolute: Ray workers load it themselves
        stage.tokenizer = str(local) if local is not None else str(tokenizer)
        tokenizer = load_tokenizer(tokenizer)
    stage.__dict__["_tokenizer"] = tokenizer  # this process's copy (a Ray worker loads its own)
    parts: list[np.ndarray] = []
    diversity = _Diversity()
    for part in executor.map_blocks(Path(path), stage):
        parts.append(part["values"])
        diversity.update(part["diversity"])
    values = np.concatenate(parts) if parts else np.zeros((0, len(_VALUES)), dtype=np.int64)
    n = len(values)
    if n == 0:
        raise DatasetError([RowError(0, "<file>", "the file has no rows")])
    column = {name: values[:, i].tolist() for i, name in enumerate(_VALUES)}
    chars, words, turns, tokens = column["chars"], column["words"], column["turns"], column["tokens"]
    del parts, values

    arrays = {name: np.asarray(column[name], dtype=np.float64) for name in DIFFICULTY_FEATURES}
    scores = difficulty_scores(arrays)
    buckets = bucket_of(scores, thresholds)
    bucket_counts = {name: int((buckets == i).sum()) for i, name in enumerate(BUCKETS)}
    report: dict[str, Any] = {
        "input": str(path),
        "sha256": sha256_file(path),
        "format": fmt,
        "rows": n,
        "definitions": {
            "distinct_n": DISTINCT_N_DEFINITION,
            "ngram_entropy": ENTROPY_DEFINITION,
            "difficulty": DIFFICULTY_DEFINITION,
        },
        "stats": {
            "rows": n,
            "chars": distribution(chars, bins=bins),
            "words": distribution(words, bins=bins),
            "tokens": distribution(tokens, bins=bins) if tokenizer is not None else None,
            "tokenizer": getattr(tokenizer, "name_or_path", None) if tokenizer is not None else None,
            "turns": {
                **distribution(turns, bins=bins),
                "counts": {str(k): v for k, v in sorted(Counter(turns).items())},
            },
        },
        "distinct_1": diversity.distinct(1),
        "distinct_2": diversity.distinct(2),
        "ngram_entropy": {"1": diversity.entropy(1), "2": diversity.entropy(2)},
        "ngram_counts": {str(k): {"unique": len(c), "total": diversity.totals[k]} for k, c in diversity.counts.items()},
        "difficulty": {
            "features": {name: distribution(values, bins=bins) for name, values in arrays.items()},
            "score": distribution(scores, bins=bins, integer=False),
            "thresholds": {"easy_below": thresholds[0], "hard_from": thresholds[1]},
            "buckets": bucket_counts,
        },
        "difficulty_buckets": bucket_counts,
    }
    if dedup:
        from training_platform.data.dedup import DedupConfig, find_duplicates

        config = dedup if isinstance(dedup, DedupConfig) else DedupConfig()
        if executor.name == "local":
            result = find_duplicates((row_text(row, fmt, fields) for row in _rows(path)), config)
        else:  # the executor's own duplicate search (Ray Data shuffles): the same clusters as the local one
            result, _ = executor.duplicates(Path(path), config, fmt=fmt, fields=fields, workdir=None)
        report["duplicates"] = {
            "exact_duplicates": result.exact_duplicates,
            "near_duplicates": result.near_duplicates,
            "duplicate_rate": round(result.removed / n, 6),
            "clusters": len(result.clusters),
            "largest_cluster": max((len(c) for c in result.clusters), default=0),
            "params": {k: result.params[k] for k in ("threshold", "num_perm", "ngram")},
        }
        report["duplicate_rate"] = report["duplicates"]["duplicate_rate"]
    if eval_sets:
        from training_platform.data.contamination import build_index, find_contamination

        index = build_index(eval_sets, n=ngram, min_tokens=min_tokens, fields=fields)
        found = find_contamination(_rows(path), index, fmt=fmt, fields=fields, min_matches=min_matches)
        report["contaminated_rows"] = [f["row"] for f in found]
        report["contamination"] = {
            "ngram": ngram,
            "min_tokens": min_tokens,
            "min_matches": min_matches,
            "eval_sets": [{"name": s.name, "path": s.path, "rows": s.rows} for s in index.sets],
            "contaminated_count": len(found),
            "contaminated_rate": round(len(found) / n, 6),
            "rows": found,
        }
    report["executor"] = executor.describe()
    report["seconds"] = round(time.perf_counter() - t0, 3)
    if report_path is not None:
        write_json(report_path, report)
    return report


def resample_to_mix(
    path: str | Path,
    output: str | Path,
    mix: dict[str, float],
    *,
    total: int | None = None,
    seed: int = 0,
    replace: bool = False,
    fmt: str | None = None,
    thresholds: tuple[float, float] = (1 / 3, 2 / 3),
    report_path: str | Path | None = None,
) -> dict[str, Any]:
    """Draw rows so the output's difficulty buckets follow `mix` (e.g. {"easy": 0.2, "medium": 0.5, "hard": 0.3},
    normalised). Without replacement, `total` defaults to (and is capped at) the largest size the buckets can
    supply; with `replace`, rows may repeat and `total` defaults to the input size. Output keeps input order
    (repeats adjacent)."""
    unknown = sorted(set(mix) - set(BUCKETS))
    if unknown or not mix or any(v < 0 for v in mix.values()) or sum(mix.values()) <= 0:
        raise ValueError(f"--mix: use non-negative weights for {', '.join(BUCKETS)}; got {mix}")
    weights = np.array([mix.get(b, 0.0) for b in BUCKETS], dtype=np.float64)
    weights /= weights.sum()
    fmt = _detect(path, fmt)
    features: dict[str, list[int]] = {name: [] for name in DIFFICULTY_FEATURES}
    for row in _rows(path):
        for name, value in difficulty_features(row, fmt).items():
            features[name].append(value)
    buckets = bucket_of(
        difficulty_scores({k: np.asarray(v, dtype=np.float64) for k, v in features.items()}), thresholds
    )
    members = [np.flatnonzero(buckets == i) for i in range(len(BUCKETS))]
    available = np.array([len(m) for m in members])
    if not replace:
        feasible = min((available[i] / weights[i] for i in range(len(BUCKETS)) if weights[i] > 0), default=0)
        cap = int(math.floor(feasible + 1e-9))
        total = cap if total is None else min(total, cap)
    elif total is None:
        total = len(buckets)
    targets = np.floor(weights * total).astype(int)
    for i in np.argsort(-(weights * total - targets))[: total - int(targets.sum())]:  # largest remainders
        targets[i] += 1
    rng = np.random.default_rng(seed)
    chosen: list[np.ndarray] = []
    for i, m in enumerate(members):
        if targets[i] == 0:
            continue
        if not replace and targets[i] > len(m):
            targets[i] = len(m)
        if len(m) == 0:
            targets[i] = 0
            continue
        chosen.append(rng.choice(m, size=int(targets[i]), replace=replace))
    picks = np.sort(np.concatenate(chosen)) if chosen else np.zeros(0, dtype=np.int64)
    counts = Counter(picks.tolist())
    with RowWriter(output) as writer:
        for record in iter_records(path):
            for _ in range(counts.get(record.index, 0)):
                writer.write(record.row)
    achieved = {b: int(targets[i]) for i, b in enumerate(BUCKETS)}
    report = {
        "input": str(path),
        "output": str(output),
        "input_rows": int(len(buckets)),
        "available": {b: int(available[i]) for i, b in enumerate(BUCKETS)},
        "requested_mix": {b: round(float(weights[i]), 4) for i, b in enumerate(BUCKETS)},
        "output_rows": int(len(picks)),
        "output_buckets": achieved,
        "achieved_mix": {b: round(achieved[b] / len(picks), 4) if len(picks) else 0.0 for b in BUCKETS},
        "replace": replace,
        "seed": seed,
    }
    if report_path is not None:
        write_json(report_path, report)
    return report

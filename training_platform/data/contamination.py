"""Contamination: word n-gram overlap between training rows and registered eval sets (n = 13 by default).

Tokens are `shingle_words` (lowercased, punctuation removed, split on whitespace). Every text field of every eval row
(its format's text fields; every string for rows of unknown format) contributes its n-grams; an eval text shorter
than n tokens but at least `min_tokens` long contributes its whole token sequence (matched as a contiguous run), so
short questions are caught too; a still shorter eval text of at least `min_chars` characters (e.g. "17+25=") counts
when a training text field is exactly the same text (after NFKC, case folding and whitespace collapsing). N-grams
never cross field boundaries. A training row is contaminated when at least
`min_matches` of its n-grams occur in an eval set; the report lists each such row (0-based index) with the eval set,
the eval row and an example of the overlapping text.

The index holds 64-bit n-gram hashes (sorted numpy arrays), not texts; training rows are streamed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from training_platform.data.formats import DatasetError
from training_platform.data.io import Record
from training_platform.data.text import iter_texts, normalize_for_exact, shingle_words

if TYPE_CHECKING:
    from training_platform.data.executors import Executor

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _word_hashes(words: list[str]) -> np.ndarray:
    import xxhash

    return np.fromiter(map(xxhash.xxh3_64_intdigest, map(str.encode, words)), dtype=np.uint64, count=len(words))


def _weights(n: int) -> np.ndarray:
    return np.random.default_rng(0xC0417A).integers(1, 2**63, size=n, dtype=np.uint64) * np.uint64(2) + np.uint64(1)


def ngram_hashes(hashes: np.ndarray, n: int, weights: np.ndarray) -> np.ndarray:
    """64-bit hashes of the contiguous n-grams of a token-hash sequence (order-sensitive weighted sum)."""
    if len(hashes) < n:
        return np.zeros(0, dtype=np.uint64)
    with np.errstate(over="ignore"):
        out = hashes[: len(hashes) - n + 1] * weights[0]
        for i in range(1, n):
            out += hashes[i : len(hashes) - n + 1 + i] * weights[i]
        return out ^ (np.uint64(n) * _GOLDEN)


@dataclass
class EvalSet:
    name: str
    path: str | None
    rows: int


class ContaminationIndex:
    """N-gram index of one or more eval sets."""

    def __init__(self, n: int = 13, *, min_tokens: int = 8, min_chars: int = 5, fields: list[str] | None = None):
        if n < 1:
            raise ValueError(f"--ngram: must be >= 1, got {n}")
        self.n, self.min_tokens, self.min_chars, self.fields = n, min(min_tokens, n), min_chars, fields
        self._exact: dict[str, int] = {}  # short eval text -> owner id
        self._weights = _weights(n)
        self.sets: list[EvalSet] = []
        self._by_len: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}  # len -> [(hashes, owner ids)]
        self._owners: list[tuple[int, int]] = []  # owner id -> (eval set index, eval row index)
        self._frozen: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.skipped_short = 0

    def __getstate__(self) -> dict[str, Any]:
        """Pickled frozen (a stage ships the index to Ray workers): each table once, as the only part of its
        length (pickle stores an array that both hold once)."""
        tables = self._tables()
        return {**self.__dict__, "_by_len": {length: [table] for length, table in tables.items()}}

    def add_texts(self, name: str, rows: Iterable[Iterable[str]], path: str | None = None) -> EvalSet:
        """rows: for each eval row, its texts."""
        set_index = len(self.sets)
        count = 0
        for row_index, texts in enumerate(rows):
            count += 1
            owner = len(self._owners)
            self._owners.append((set_index, row_index))
            for text in texts:
                words = shingle_words(text)
                if len(words) >= self.n:
                    length = self.n
                elif len(words) >= self.min_tokens:
                    length = len(words)
                else:
                    key = normalize_for_exact(text)
                    if len(key) >= self.min_chars:
                        self._exact.setdefault(key, owner)
                    elif key:
                        self.skipped_short += 1
                    continue
                grams = ngram_hashes(_word_hashes(words), length, self._weights)
                self._by_len.setdefault(length, []).append((grams, np.full(len(grams), owner, dtype=np.int64)))
        self._frozen = {}
        eval_set = EvalSet(name, path, count)
        self.sets.append(eval_set)
        return eval_set

    def add_file(self, path: str | Path, name: str | None = None) -> EvalSet:
        from training_platform.data.formats import detect_format
        from training_platform.data.io import iter_rows

        path = Path(path)
        fmt: list[str | None] = []

        def texts() -> Iterable[list[str]]:
            for row in iter_rows(path):
                if not fmt:
                    fmt.append(detect_format(row) if isinstance(row, dict) else None)
                yield list(iter_texts(row, fmt[0], self.fields))

        return self.add_texts(name or path.stem, texts(), str(path))

    def _tables(self) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        if not self._frozen:
            for length, parts in self._by_len.items():
                hashes = np.concatenate([h for h, _ in parts])
                owners = np.concatenate([o for _, o in parts])
                order = np.argsort(hashes, kind="stable")
                self._frozen[length] = (hashes[order], owners[order])
        return self._frozen

    def matches(self, texts: Iterable[str]) -> list[tuple[int, int, str]]:
        """(owner id, match count, example overlapping text) for the eval rows a training row overlaps, most
        matches first."""
        tables = self._tables()
        counts: dict[int, int] = {}
        examples: dict[int, str] = {}
        for text in texts:
            if self._exact:
                key = normalize_for_exact(text)
                if key in self._exact:
                    owner = self._exact[key]
                    counts[owner] = counts.get(owner, 0) + 1
                    examples.setdefault(owner, key)
            words = shingle_words(text)
            if len(words) < self.min_tokens:
                continue
            hashes = _word_hashes(words)
            for length, (table, owners) in tables.items():
                grams = ngram_hashes(hashes, length, self._weights)
                if not len(grams):
                    continue
                pos = np.searchsorted(table, grams)
                pos[pos >= len(table)] = len(table) - 1
                hit = np.flatnonzero(table[pos] == grams)
                for h in hit.tolist():
                    owner = int(owners[pos[h]])
                    counts[owner] = counts.get(owner, 0) + 1
                    examples.setdefault(owner, " ".join(words[h : h + length]))
        return sorted(((o, c, examples[o]) for o, c in counts.items()), key=lambda x: -x[1])

    def owner(self, owner_id: int) -> tuple[str, int]:
        set_index, row_index = self._owners[owner_id]
        return self.sets[set_index].name, row_index


def build_index(
    eval_sets: Iterable[str | Path],
    *,
    n: int = 13,
    min_tokens: int = 8,
    min_chars: int = 5,
    fields: list[str] | None = None,
) -> ContaminationIndex:
    index = ContaminationIndex(n, min_tokens=min_tokens, min_chars=min_chars, fields=fields)
    names: set[str] = set()
    for path in eval_sets:
        name = Path(path).stem
        while name in names:
            name += "_"
        names.add(name)
        index.add_file(path, name)
    return index


def contaminated_row(
    index: ContaminationIndex,
    row_index: int,
    row: Any,
    fmt: str | None,
    fields: list[str] | None,
    min_matches: int,
) -> dict[str, Any] | None:
    """The report entry of a contaminated training row (None when it is not): {row (0-based), eval_set, eval_row,
    matched_ngrams, example, eval_rows_matched}."""
    found = index.matches(iter_texts(row, fmt, fields))
    if not found or found[0][1] < min_matches:
        return None
    owner, count, example = found[0]
    eval_set, eval_row = index.owner(owner)
    return {
        "row": row_index,
        "eval_set": eval_set,
        "eval_row": eval_row,
        "matched_ngrams": count,
        "example": example,
        "eval_rows_matched": len(found),
    }


def find_contamination(
    rows: Iterable[Any],
    index: ContaminationIndex,
    *,
    fmt: str | None = None,
    fields: list[str] | None = None,
    min_matches: int = 1,
) -> list[dict[str, Any]]:
    """One entry per contaminated training row: {row (0-based), eval_set, eval_row, matched_ngrams, example}."""
    from training_platform.data.formats import detect_format

    out = []
    for i, row in enumerate(rows):
        if fmt is None and isinstance(row, dict):
            fmt = detect_format(row)
        entry = contaminated_row(index, i, row, fmt, fields, min_matches)
        if entry is not None:
            out.append(entry)
    return out


def _scan(
    path: str | Path,
    index: ContaminationIndex,
    *,
    fields: list[str] | None,
    min_matches: int,
    executor: Executor | None,
    writer: Any = None,
) -> tuple[list[dict[str, Any]], int]:
    """The contaminated rows of `path` (matched block by block on `executor`, default local), and the rows written
    to `writer` (the others, in order; None: none written)."""
    from training_platform.data.executors import get_executor
    from training_platform.data.stages import format_start

    executor = executor or get_executor("local")
    fmt, fmt_from = format_start(path, None)
    stage = DecontaminateStage(index, fmt, fmt_from, fields, min_matches, keep_rows=writer is not None)
    found: list[dict[str, Any]] = []
    kept = 0
    for part_found, part_kept in executor.map_blocks(Path(path), stage):
        found += part_found
        for row in part_kept:
            writer.write(row)
            kept += 1
    return found, kept


def _report(index: ContaminationIndex, found: list[dict[str, Any]], n: int, min_tokens: int, min_matches: int):
    return {
        "ngram": n,
        "min_tokens": min_tokens,
        "min_matches": min_matches,
        "eval_sets": [{"name": s.name, "path": s.path, "rows": s.rows} for s in index.sets],
        "contaminated_rows": [f["row"] for f in found],
        "contaminated": found,
        "eval_texts_too_short": index.skipped_short,
    }


def contamination_report(
    path: str | Path,
    eval_sets: list[str | Path],
    *,
    n: int = 13,
    min_tokens: int = 8,
    min_matches: int = 1,
    fields: list[str] | None = None,
    executor: Executor | None = None,
) -> dict[str, Any]:
    index = build_index(eval_sets, n=n, min_tokens=min_tokens, fields=fields)
    found, _ = _scan(path, index, fields=fields, min_matches=min_matches, executor=executor)
    return _report(index, found, n, min_tokens, min_matches)


@dataclass
class DecontaminateStage:
    """Per block: the contaminated rows' report entries, and the other rows (when `keep_rows`)."""

    index: ContaminationIndex
    fmt: str | None
    fmt_from: int
    fields: list[str] | None
    min_matches: int
    keep_rows: bool = True

    def __call__(self, records: Sequence[Record]) -> tuple[list[dict[str, Any]], list[Any]]:
        found: list[dict[str, Any]] = []
        kept: list[Any] = []
        for record in records:
            if record.error is not None:
                raise DatasetError([record.error])
            fmt = self.fmt if record.index >= self.fmt_from else None
            entry = contaminated_row(self.index, record.index, record.row, fmt, self.fields, self.min_matches)
            if entry is not None:
                found.append(entry)
            elif self.keep_rows:
                kept.append(record.row)
        return found, kept


def decontaminate_file(
    path: str | Path,
    output: str | Path,
    eval_sets: list[str | Path],
    *,
    n: int = 13,
    min_tokens: int = 8,
    min_matches: int = 1,
    fields: list[str] | None = None,
    report_path: str | Path | None = None,
    executor: Executor | None = None,
) -> dict[str, Any]:
    """Write the rows that are not contaminated (atomic); the report lists the removed ones. The eval sets' index
    is built here; the rows are matched block by block on `executor` (default: local) and written here, in order."""
    from training_platform.core.files import write_json
    from training_platform.data.executors import get_executor
    from training_platform.data.io import RowWriter
    from training_platform.data.versions import derived_version

    executor = executor or get_executor("local")
    index = build_index(eval_sets, n=n, min_tokens=min_tokens, fields=fields)
    with RowWriter(output) as writer:
        found, kept = _scan(path, index, fields=fields, min_matches=min_matches, executor=executor, writer=writer)
    report = _report(index, found, n, min_tokens, min_matches)
    report.update(
        {
            "input": str(path),
            "output": str(output),
            "output_rows": kept,
            "removed_rows": len(found),
            "executor": executor.describe(),
            "version": derived_version(
                output,
                parent=path,
                operation="decontaminate",
                params={
                    "eval_sets": [str(p) for p in eval_sets],
                    "ngram": n,
                    "min_tokens": min_tokens,
                    "min_matches": min_matches,
                },
            ),
        }
    )
    if report_path is not None:
        write_json(report_path, report)
    return report

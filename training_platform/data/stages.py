"""The block stage (data/executors/) of `score`: the row work that runs where the executor puts it (this process, or
Ray workers); `score_file` merges the blocks' results in file order and writes the rows.

- `ScoreStage` (data/score.py `score_file`): per row its heuristic scores and perplexity, and its text when the judge
  (which stays in the driver: one cache, requests in row order) needs it. The perplexity model is loaded once per
  process and run (`perplexity_scorer`). Rows are scored in batches of `batch_size` rows counted from the file's
  first row, as the local pass batches them, so each row is padded with the same rows: a batch that a block
  boundary cuts comes back unscored, with its rendered text, and `scored_rows` scores it in the driver.
- `format_start`: the rows' format as the local pass sees it (score and decontaminate: data/contamination.py's
  `DecontaminateStage`): detected on the way, from the first row that shows one; the rows before it have none.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training_platform.data.formats import DatasetError, detect_format, validate_row
from training_platform.data.io import Record, iter_records
from training_platform.data.quality import PerplexityScorer, heuristic_scores
from training_platform.data.text import row_text


def format_start(path: str | Path, fmt: str | None) -> tuple[str | None, int]:
    """(format, index of the first row it applies to): `fmt` from row 0 when given; else the format of the first
    object row that shows one, from that row on. The scan stops at the first unreadable row (the stage raises its
    error there)."""
    if fmt is not None:
        return fmt, 0
    for record in iter_records(path):
        if record.error is not None:
            break
        if isinstance(record.row, dict):
            detected = detect_format(record.row)
            if detected is not None:
                return detected, record.index
    return None, 0


# ---------------------------------------------------------------------------------------------- score

_SCORERS: dict[tuple[str, str, int], PerplexityScorer] = {}  # this process's model: one run's at a time


def perplexity_scorer(key: tuple[str, str, int]) -> PerplexityScorer:
    """The perplexity model of run `key` = (run id, model path, max length), loaded once in this process."""
    if key not in _SCORERS:
        _SCORERS.clear()  # a worker keeps the latest run's model only
        _SCORERS[key] = PerplexityScorer(key[1], max_length=key[2])
    return _SCORERS[key]


def release_scorer(key: tuple[str, str, int]) -> None:
    _SCORERS.pop(key, None)


def model_key(model: str | Path, max_length: int) -> tuple[str, str, int]:
    """A new run's model key. A model directory is made absolute: Ray workers do not share the driver's cwd."""
    local = Path(model).expanduser()
    return uuid.uuid4().hex, str(local.resolve()) if local.exists() else str(model), max_length


# One scored row: (index, row, text (for the judge, else None), scores, rendered text while its perplexity is due)
ScoredRow = tuple[int, Any, str | None, dict[str, Any], str | None]


@dataclass
class ScoreStage:
    heuristics: bool
    fmt: str | None  # the rows' format from row `fmt_from` on (none before it)
    fmt_from: int
    fields: list[str] | None
    batch_size: int
    model: tuple[str, str, int] | None  # model_key(): perplexity
    with_text: bool = False  # the judge (in the driver) reads each row's text

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_scorer"}

    def scorer(self) -> PerplexityScorer | None:
        """The model, held by this stage once it has it (a Ray task gets a fresh copy of the stage: the process's
        `perplexity_scorer` keeps it across tasks)."""
        if self.model is None:
            return None
        if "_scorer" not in self.__dict__:
            self.__dict__["_scorer"] = perplexity_scorer(self.model)
        return self.__dict__["_scorer"]

    def __call__(self, records: Sequence[Record]) -> list[ScoredRow]:
        scorer = self.scorer()
        out: list[ScoredRow] = []
        batch: list[ScoredRow] = []  # the rows of one perplexity batch (batch_size rows from the file's start)

        def close() -> None:
            if batch and scorer is not None and len(batch) == self.batch_size:  # whole in this block: scored here
                for item, ppl in zip(batch, scorer.score([item[4] or "" for item in batch]), strict=True):
                    item[3]["perplexity"] = ppl
                    out.append(item[:4] + (None,))
            else:
                out.extend(batch)  # cut by a block boundary (or the file's last, short batch): the driver scores it
            batch.clear()

        for record in records:
            if record.error is not None:
                raise DatasetError([record.error])
            row = record.row
            fmt = self.fmt if record.index >= self.fmt_from else None
            text = row_text(row, fmt, self.fields)
            scores = heuristic_scores(text) if self.heuristics else {}
            if scorer is None:
                out.append((record.index, row, text if self.with_text else None, scores, None))
                continue
            rendered = text
            if fmt is not None and isinstance(row, dict) and not validate_row(fmt, row):
                from training_platform.data.convert import render_row

                rendered = render_row(row, fmt, scorer.tokenizer)
            if batch and batch[0][0] // self.batch_size != record.index // self.batch_size:
                close()
            batch.append((record.index, row, text if self.with_text else None, scores, rendered))
        close()
        return out


def scored_rows(
    parts: Iterable[list[ScoredRow]], scorer: PerplexityScorer | None, batch_size: int
) -> Iterator[tuple[Any, str | None, dict[str, Any]]]:
    """(row, text, scores) in file order from the blocks' results; a batch that block boundaries cut is scored here,
    once its rows are all in (the rows of the next batch, or the end, tell)."""
    pending: list[ScoredRow] = []

    def settle() -> Iterator[tuple[Any, str | None, dict[str, Any]]]:
        if pending and scorer is not None:
            for item, ppl in zip(pending, scorer.score([item[4] or "" for item in pending]), strict=True):
                item[3]["perplexity"] = ppl
        yield from ((item[1], item[2], item[3]) for item in pending)
        pending.clear()

    for part in parts:
        for item in part:
            if item[4] is None:
                yield from settle()
                yield item[1], item[2], item[3]
                continue
            if pending and pending[0][0] // batch_size != item[0] // batch_size:
                yield from settle()
            pending.append(item)
    yield from settle()

"""Custom sets: the user's JSONL with prompts and reference answers, scored by a chosen scorer.

Rows: the prompt as `prompt` (text), `messages` (a chat list) or `question`; the reference as `answer` (or
`reference` / `target`; a list means "any of these"); optional `id` and `scorer` (overrides the benchmark's).
Scorers: exact, numeric, math, regex, contains (see `training_platform.evaluation.scorers`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from training_platform.evaluation.benchmarks.base import Benchmark, Item, format_template, register_benchmark
from training_platform.evaluation.generation import GenerationRequest
from training_platform.evaluation.scorers import SCORERS, score_output
from training_platform.evaluation.specs import BenchmarkSpec

_REFERENCE_KEYS = ("answer", "reference", "target")


class CustomParams(BenchmarkSpec):
    name: Literal["custom"]
    scorer: Literal["exact", "numeric", "math", "regex", "contains"] | None = Field(
        None, description="How outputs are compared with the reference (a row's own `scorer` wins)."
    )
    extract_regex: str | None = Field(None, description="Regex extracting the answer (group 1 if any).")
    case_sensitive: bool = False
    tolerance: float = Field(1e-6, ge=0.0, le=1e6)
    math_timeout_s: float = Field(5.0, gt=0, le=120, description="scorer math: math-verify timeout per comparison.")


@register_benchmark("custom")
class Custom(Benchmark[CustomParams]):
    params = CustomParams
    default_max_new_tokens = 256
    run_options = frozenset({"n_shot", "scorer", "extract_regex"})
    score_options = frozenset({"scorer", "extract_regex"})
    data_help = "JSONL with prompt (or messages / question) and answer; choose a scorer with --scorer"

    def parse_row(self, row: dict[str, Any], index: int) -> Item:
        if not any(isinstance(row.get(k), str) and row[k].strip() for k in ("prompt", "question")) and not isinstance(
            row.get("messages"), list
        ):
            raise ValueError("needs 'prompt', 'question' or 'messages'")
        key = next((k for k in _REFERENCE_KEYS if k in row and row[k] is not None), None)
        if key is None:
            raise ValueError(f"needs a reference answer ({' / '.join(_REFERENCE_KEYS)})")
        scorer = row.get("scorer") or self.spec.scorer
        if scorer is None:
            raise ValueError(f"no scorer: pass --scorer ({', '.join(SCORERS)}) or give the row a 'scorer'")
        if scorer not in SCORERS:
            raise ValueError(f"unknown scorer {scorer!r}; choose one of: {', '.join(SCORERS)}")
        return Item(id=str(row.get("id", index)), row=row, reference=row[key], index=index, extra={"scorer": scorer})

    def _text(self, item: Item) -> str:
        if self.spec.prompt_template:
            return format_template(self.spec.prompt_template, item.row)
        return str(item.row.get("prompt") or item.row.get("question"))

    def build_request(self, item: Item, shots: list[Item], chat: bool) -> GenerationRequest:
        if isinstance(item.row.get("messages"), list) and not self.spec.prompt_template:
            return GenerationRequest(messages=list(item.row["messages"]))
        examples = [
            (self._text(s), str(s.reference if not isinstance(s.reference, list) else s.reference[0])) for s in shots
        ]
        if chat:
            return GenerationRequest(messages=self._messages(self._text(item), examples))
        blocks = [f"{q}\n{a}" for q, a in examples]
        return GenerationRequest(prompt="\n\n".join([*blocks, self._text(item)]))

    def score(self, item: Item, output: str) -> dict[str, Any]:
        result = score_output(
            item.extra["scorer"],
            output,
            item.reference,
            extract_regex=self.spec.extract_regex,
            case_sensitive=self.spec.case_sensitive,
            tolerance=self.spec.tolerance,
            math_timeout=self.spec.math_timeout_s,
        )
        return {"extracted": result.extracted, "correct": result.correct, "scorer": item.extra["scorer"]}

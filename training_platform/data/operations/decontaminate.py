"""`decontaminate`: drop rows sharing n-grams with eval sets (data/contamination.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from training_platform.core.userpath import UserFile
from training_platform.data.operations.base import (
    CheckContext,
    FieldErrors,
    Operation,
    OperationParams,
    OperationResult,
    RunContext,
    register_operation,
)


class DecontaminateParams(OperationParams):
    eval_sets: list[UserFile] = Field(min_length=1, max_length=50, description="Eval set files (path policy applies).")
    ngram: int = Field(13, ge=1, le=64)
    min_tokens: int = Field(8, ge=1, le=1_000_000)
    min_matches: int = Field(1, ge=1, le=1_000_000)


@register_operation("decontaminate", DecontaminateParams)
class Decontaminate(Operation[DecontaminateParams]):
    """Drop rows sharing n-grams with eval sets: eval_sets (server paths), ngram, min_tokens, min_matches."""

    executors = ("local", "ray")
    example = {"eval_sets": ["demo/data/gsm8k_eval.jsonl"], "ngram": 13}

    def check(self, params: DecontaminateParams, out: dict[str, Any], ctx: CheckContext) -> FieldErrors:
        from training_platform.data.formats import SUPPORTED_SUFFIXES

        errors: FieldErrors = []
        for i, value in enumerate(params.eval_sets):
            loc = f"params.eval_sets[{i}]"
            problem = ctx.path_problem(loc, value, "file")
            if problem:
                errors.append((loc, problem))
            elif Path(value).suffix.lower() not in (*SUPPORTED_SUFFIXES, ".ndjson"):
                errors.append((loc, f"unsupported file type; use one of {', '.join(SUPPORTED_SUFFIXES)}"))
        return errors

    def run(self, params: dict[str, Any], source: Path, output: Path, ctx: RunContext) -> OperationResult:
        from training_platform.data.contamination import decontaminate_file

        eval_sets: list[str | Path] = [ctx.resolve(p) for p in params["eval_sets"]]
        report = decontaminate_file(
            source,
            output,
            eval_sets,
            n=params["ngram"],
            min_tokens=params["min_tokens"],
            min_matches=params["min_matches"],
            executor=ctx.executor,
        )
        stats = {
            "input_rows": report["output_rows"] + report["removed_rows"],
            "output_rows": report["output_rows"],
            "removed_rows": report["removed_rows"],
        }
        return OperationResult(output, report, stats)

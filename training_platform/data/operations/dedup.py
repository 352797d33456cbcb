"""`dedup`: exact and MinHash near-duplicate removal (data/dedup.py); the params are DedupConfig's fields."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from training_platform.data.dedup import DedupConfig
from training_platform.data.operations.base import (
    CheckContext,
    FieldErrors,
    Operation,
    OperationResult,
    RunContext,
    params_model,
    register_operation,
)

DedupParams = params_model(
    "DedupParams",
    DedupConfig,
    exclude=("batch_size",),  # memory, not results: the worker's choice
    extra={"fields": (list[str] | None, None)},
)


def _config(params: dict[str, Any]) -> DedupConfig:
    return DedupConfig(**{k: v for k, v in params.items() if k != "fields"})


@register_operation("dedup", DedupParams)
class Dedup(Operation[Any]):
    """Exact and MinHash near-duplicate removal: threshold, num_perm, ngram, bands/rows, margin, keep (first|best),
    exact, near, seed, fields."""

    executors = ("local", "ray")
    example = {"threshold": 0.8, "num_perm": 128, "ngram": 5, "keep": "first", "exact": True, "near": True}

    def check(self, params: Any, out: dict[str, Any], ctx: CheckContext) -> FieldErrors:
        try:
            _config(out).resolved()
        except ValueError as exc:  # the CLI's wording ("--bands and --rows go together"): in API terms
            text = str(exc)
            match = re.match(r"--([a-z][a-z-]*)(: )?", text)
            field = match.group(1).replace("-", "_") if match else ""
            if match and match.group(2):
                text = text[match.end() :]
            text = re.sub(r"--([a-z][a-z-]*)", lambda m: m.group(1).replace("-", "_"), text)
            return [(f"params.{field}" if field in DedupParams.model_fields else "params", text)]
        return []

    def run(self, params: dict[str, Any], source: Path, output: Path, ctx: RunContext) -> OperationResult:
        from training_platform.data.dedup import dedup_file

        report = dedup_file(
            source, output, _config(params), fields=params.get("fields"), workdir=ctx.workdir, executor=ctx.executor
        )
        keys = ("input_rows", "output_rows", "exact_duplicates", "near_duplicates", "duplicate_rate")
        stats = {k: report[k] for k in keys}
        stats["clusters"] = len(report["clusters"])
        return OperationResult(output, report, stats)

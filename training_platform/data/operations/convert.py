"""`convert`: the rows in another format (data/convert.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from training_platform.data.operations.base import (
    CheckContext,
    FieldErrors,
    Operation,
    OperationParams,
    OperationResult,
    RunContext,
    register_operation,
)


class ConvertParams(OperationParams):
    to: str
    data_source: str = "custom"
    ability: str | None = None


@register_operation("convert", ConvertParams)
class Convert(Operation[ConvertParams]):
    """Convert the rows to another format: {"to": FORMAT}; optional data_source, ability (verl)."""

    executors = ("local", "ray")
    example = {"to": "messages"}
    example_by_format = {"messages": {"to": "alpaca"}}

    def check(self, params: ConvertParams, out: dict[str, Any], ctx: CheckContext) -> FieldErrors:
        from training_platform.data.convert import can_convert, target_format

        try:
            out["to"] = target_format(params.to)
        except ValueError as exc:
            return [("params.to", str(exc).split(": ", 1)[-1])]
        if ctx.input_format is not None and not can_convert(ctx.input_format, out["to"]):
            return [("params.to", f"format {ctx.input_format!r} cannot be converted to {out['to']!r}")]
        return []

    def output_path(self, source: Path, workdir: Path, params: dict[str, Any]) -> Path:
        """verl rows are Parquet; every other format is written as JSONL."""
        return workdir / ("output.parquet" if params["to"] == "verl" else "output.jsonl")

    def run(self, params: dict[str, Any], source: Path, output: Path, ctx: RunContext) -> OperationResult:
        from training_platform.data.convert import convert_file

        result = convert_file(
            source,
            output,
            params["to"],
            data_source=params["data_source"],
            ability=params.get("ability"),
            executor=ctx.executor,
        )
        stats = {
            "input_rows": result.rows,
            "output_rows": result.converted,
            "source_format": result.source_format,
            "target_format": result.target_format,
        }
        return OperationResult(output, result.to_dict(), stats)

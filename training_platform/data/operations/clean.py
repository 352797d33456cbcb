"""`clean`: a cleaning recipe (data/clean.py: the operators of data/operators/) over the rows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import Field

from training_platform.core.userpath import user_paths
from training_platform.data.operations.base import (
    CheckContext,
    FieldErrors,
    Operation,
    OperationParams,
    OperationResult,
    RunContext,
    register_operation,
)


class CleanParams(OperationParams):
    recipe: dict[str, Any] | list[Any] = Field(description="The cleaning recipe, inline (as the YAML, in JSON).")
    format: str | None = Field(None, description="Row format (default: the recipe's, else detected).")
    samples: int = Field(5, ge=0, le=50, description="Sample rows per operator in the report.")


@register_operation("clean", CleanParams)
class Clean(Operation[CleanParams]):
    """A cleaning recipe: {"recipe": {"operators": [{"op": ...}, ...]}} (as the YAML recipes, in JSON); optional
    format, samples."""

    executors = ("local", "ray")
    example = {
        "recipe": {
            "operators": [
                {"op": "fix_unicode"},
                {"op": "normalize_whitespace"},
                {"op": "turn_filter"},
                {"op": "length_filter", "unit": "words", "min": 1, "max": 4000},
            ]
        }
    }

    def check(self, params: CleanParams, out: dict[str, Any], ctx: CheckContext) -> FieldErrors:
        from training_platform.data.clean import RecipeError, parse_recipe
        from training_platform.data.formats import DATA_FORMATS

        errors: FieldErrors = []
        try:
            recipe = parse_recipe(params.recipe)
        except RecipeError as exc:
            errors += [
                (f"params.recipe.{where}" if not where.startswith("<") else "params.recipe", why)
                for where, why in exc.errors
            ]
        else:
            for i, step in enumerate(recipe.steps):
                tokenizer = getattr(step.params, "tokenizer", None)
                if isinstance(tokenizer, str) and tokenizer:
                    loc = f"params.recipe.operators[{i}].tokenizer"
                    problem = ctx.path_problem(loc, tokenizer, "model")
                    if problem:
                        errors.append((loc, problem))
            out["recipe"] = recipe.to_dict()
        if params.format is not None and params.format not in DATA_FORMATS:
            errors.append(("params.format", f"unknown format {params.format!r}; use one of {', '.join(DATA_FORMATS)}"))
        return errors

    def paths(self, params: CleanParams) -> Iterator[tuple[str, str, Any]]:
        """The recipe's operators' own path fields (a length filter's tokenizer)."""
        from training_platform.data.clean import parse_recipe

        for i, step in enumerate(parse_recipe(params.recipe).steps):
            for loc, value, marker in user_paths(step.params):
                yield f"recipe.operators[{i}].{loc}", value, marker

    def needs_transformers(self, params: dict[str, Any]) -> bool:
        return any(
            step.get("unit") == "tokens" or step.get("tokenizer")
            for step in (params.get("recipe") or {}).get("operators", [])
        )

    def run(self, params: dict[str, Any], source: Path, output: Path, ctx: RunContext) -> OperationResult:
        from training_platform.data.clean import clean_file

        report = clean_file(
            source, output, params["recipe"], fmt=params.get("format"), samples=params["samples"], executor=ctx.executor
        )
        stats = {k: report[k] for k in ("input_rows", "output_rows", "removed_rows")}
        return OperationResult(output, report, stats, format=report.get("format"))

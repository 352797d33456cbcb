"""`score`: quality scores per row (heuristics, perplexity, an LLM judge or reward model: data/score.py), optionally
keeping only the rows a score selects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, model_validator
from pydantic.json_schema import SkipJsonSchema

from training_platform.core.userpath import UserDir
from training_platform.data.operations.base import (
    CheckContext,
    FieldErrors,
    Operation,
    OperationParams,
    OperationResult,
    RunContext,
    register_operation,
)
from training_platform.data.score import JudgeConfig


class JudgeParams(JudgeConfig):
    """An LLM judge or reward model behind a named endpoint: the data factory's JudgeConfig (data/score.py), with
    tighter caps for a job anyone may submit and without its cache file (a server path)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    endpoint: str = Field(
        min_length=1, max_length=64, description="The name of an endpoint the operator defined (GET /api/v1/endpoints)."
    )
    prompt_template: str | None = Field(  # type: ignore[assignment]
        None, max_length=20_000, description="With {text}; default: a 0-10 quality grade."
    )
    max_tokens: int = Field(8, ge=1, le=4096)
    timeout_s: float = Field(30.0, gt=0, le=600)
    max_retries: int = Field(2, ge=0, le=10)
    max_text_chars: int = Field(8000, ge=100, le=1_000_000)
    cache_path: SkipJsonSchema[None] = Field(None, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _no_urls(cls, data: Any) -> Any:
        return data  # extra="forbid" refuses base_url / api_key_env at their own field path (params.judge.base_url)

    def config(self) -> JudgeConfig:
        """The JudgeConfig the scorer runs (its defaults where these params are unset)."""
        return JudgeConfig.model_validate({k: v for k, v in self.model_dump().items() if v is not None})


class ScoreParams(OperationParams):
    heuristics: bool = True
    fields: list[str] | None = None
    perplexity_model: UserDir | None = Field(None, description="Local causal LM directory (path policy applies).")
    max_length: int = Field(512, ge=8, le=8192)
    by: str | None = Field(None, description="Keep rows by this score (with min/max/top_k).")
    min: float | None = None
    max: float | None = None
    top_k: int | None = Field(None, ge=1, le=100_000_000)
    lowest: bool = False
    judge: JudgeParams | None = Field(
        None, description="Also score with an LLM judge / reward model (stored as `judge` / `reward`)."
    )


@register_operation("score", ScoreParams)
class Score(Operation[ScoreParams]):
    """Score rows (heuristics, perplexity_model, fields, max_length, judge: an LLM judge on an operator-named
    endpoint); keep rows by a score with by + min/max/top_k (lowest)."""

    executors = ("local", "ray")  # heuristics and perplexity as Ray Data stages; the judge in the driver
    example = {"heuristics": True, "by": "quality", "min": 0.3}

    def check(self, params: ScoreParams, out: dict[str, Any], ctx: CheckContext) -> FieldErrors:
        errors: FieldErrors = []
        if params.by is None and (params.min is not None or params.max is not None or params.top_k is not None):
            errors.append(("params.by", "name the score to filter on (e.g. quality) when giving min, max or top_k"))
        if params.by is not None and params.min is None and params.max is None and params.top_k is None:
            errors.append(("params.by", "give min, max or top_k to filter by a score"))
        if params.perplexity_model:
            problem = ctx.path_problem("params.perplexity_model", params.perplexity_model, "dir")
            if problem:
                errors.append(("params.perplexity_model", problem))
        if params.judge is not None:
            # the endpoint known and serving the model: at submission and again in the worker (check runs in both)
            errors += ctx.endpoint_errors("params.judge", params.judge.config())
        return errors

    def needs_transformers(self, params: dict[str, Any]) -> bool:
        return bool(params.get("perplexity_model"))

    def run(self, params: dict[str, Any], source: Path, output: Path, ctx: RunContext) -> OperationResult:
        from training_platform.data.score import score_file, score_then_filter

        kwargs: dict[str, Any] = {
            "heuristics": params["heuristics"],
            "fields": params.get("fields"),
            "perplexity_model": ctx.resolve(params["perplexity_model"]) if params.get("perplexity_model") else None,
            "perplexity_max_length": params["max_length"],
            "executor": ctx.executor,
        }
        if params.get("judge"):
            kwargs.update(judge=JudgeParams.model_validate(params["judge"]).config(), endpoints=ctx.endpoints())
        if params.get("by"):
            report = score_then_filter(
                source,
                output,
                by=params["by"],
                min_value=params.get("min"),
                max_value=params.get("max"),
                top_k=params.get("top_k"),
                lowest=params["lowest"],
                **kwargs,
            )
            stats: dict[str, Any] = {"input_rows": report["rows"], "output_rows": report["filter"]["output_rows"]}
        else:
            report = score_file(source, output, **kwargs)
            stats = {"input_rows": report["rows"], "output_rows": report["rows"]}
        stats["scores"] = {k: v.get("mean") for k, v in report.get("scores", {}).items()}
        return OperationResult(output, report, stats)

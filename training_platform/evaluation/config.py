"""Evaluation run configuration (pydantic; unknown keys are errors).

    EvalConfig(
        model=ModelSpec(path="runs/abc/final"),                 # or backend="openai", endpoint="judge", path=name
        benchmarks=[BenchmarkSpec(name="gsm8k", data="gsm8k_test.jsonl", limit=200, n_shot=5),
                    BenchmarkSpec(name="humaneval", n_samples=10, temperature=0.8, k=[1, 10])],
    )

`backend: openai` names an endpoint the operator defined (`endpoint`, see training_platform/core/endpoints.py) and the
model it serves (`path`); the URL and the key are looked up when the run starts, never carried in the config.

Per-benchmark defaults (prompt style, max new tokens, stop sequences) live in the benchmark classes; a field left
at None here means "the benchmark's default". Each benchmark has its own params model (`Benchmark.params`, a
BenchmarkSpec subclass with its own fields): `benchmarks` is their union, chosen by `name` and built from the
registry. ModelSpec, SandboxSpec and BenchmarkSpec live in `specs.py` (re-exported here).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, TypeAlias, Union

from pydantic import Discriminator, Field, Tag, field_validator, model_validator

from training_platform.evaluation.benchmarks import BENCHMARKS
from training_platform.evaluation.specs import BenchmarkSpec, ModelSpec, SandboxSpec, StrictSpec

__all__ = ["BenchmarkParams", "BenchmarkSpec", "EvalConfig", "ModelSpec", "SandboxSpec"]


def _benchmark_tag(value: Any) -> str:
    name = value.get("name") if isinstance(value, dict) else getattr(value, "name", None)
    return name if isinstance(name, str) and name in BENCHMARKS else "unregistered"


if TYPE_CHECKING:
    # mypy cannot see through a union built from the registry: statically every benchmark's params are a
    # BenchmarkSpec (a benchmark reads its own fields through `Benchmark[Params]`).
    BenchmarkParams: TypeAlias = BenchmarkSpec
else:
    # One member per registered name (math and math500 share one params model), chosen by `name`; a name no
    # benchmark registered validates as the plain BenchmarkSpec and is refused by `get_benchmark` (as before).
    BenchmarkParams = Annotated[
        Union[  # noqa: UP007 - built from the registry
            tuple(Annotated[cls.params, Tag(name)] for name, cls in BENCHMARKS.items())
            + (Annotated[BenchmarkSpec, Tag("unregistered")],)
        ],
        Discriminator(_benchmark_tag),
    ]


class EvalConfig(StrictSpec):
    model: ModelSpec
    benchmarks: list[BenchmarkParams] = Field(..., min_length=1)
    seed: int = Field(0, ge=0, le=2**32 - 1)
    sandbox: SandboxSpec = Field(default_factory=SandboxSpec)
    name: str | None = Field(None, description="A label for reports.")

    @field_validator("benchmarks", mode="before")
    @classmethod
    def _own_params(cls, value: Any) -> Any:
        """A plain BenchmarkSpec of a registered benchmark becomes that benchmark's params (re-validated)."""
        if not isinstance(value, list):
            return value
        out = []
        for spec in value:
            bench = BENCHMARKS.get(spec.name) if isinstance(spec, BenchmarkSpec) else None
            if bench is not None and type(spec) is not bench.params:
                spec = spec.model_dump(exclude_unset=True) | {"name": spec.name}
            out.append(spec)
        return out

    @model_validator(mode="after")
    def _unique(self) -> EvalConfig:
        names = [b.name for b in self.benchmarks]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"benchmark listed twice: {', '.join(duplicates)}")
        return self

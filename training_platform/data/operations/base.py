"""The dataset-operation registry: what `POST /datasets/{id}/versions/{v}/operations` (a `data` job) can run.

One module per operation (`operations/<name>.py`) holds its `Params` (a pydantic model, reusing the data factory's
own configs), its extra checks and its run function, in an `Operation` subclass decorated with
`@register_operation("<name>", Params)`; its import in `operations/__init__.py` registers it. The platform
(services/dataset_operations.py) validates, lists and runs operations only through this registry.

No HTTP, database or Celery here: what needs them (the path policy for the job's owner, the operator's endpoints,
paths relative to TP_DATA_DIR) reaches an operation through `CheckContext` / `RunContext`, filled in by the service.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, create_model

PathKind = Literal["file", "dir", "model"]  # model: a local directory, or a hub id (which passes)
FieldErrors = list[tuple[str, str]]  # [(loc, msg)], locs like `params.recipe.operators[0].unit`


class OperationParams(BaseModel):
    """Base of every operation's params: unknown keys and NaN/inf are refused."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


def _no_problem(loc: str, value: str, kind: PathKind) -> str | None:
    return None


def _no_endpoint_errors(loc: str, judge: Any) -> FieldErrors:
    return []


def _no_endpoints() -> Any:
    return None


@dataclass
class CheckContext:
    """What an operation's `check` may ask of the platform (services/dataset_operations.py fills it in)."""

    input_format: str | None = None  # the input version's row format, when known
    # (loc, value, kind) -> why `value` may not be used (path policy for the job's owner, missing file), or None
    path_problem: Callable[[str, str, PathKind], str | None] = _no_problem
    # (loc prefix, data.score.JudgeConfig) -> problems with its endpoint/model (unknown endpoint, model not served)
    endpoint_errors: Callable[[str, Any], FieldErrors] = _no_endpoint_errors


@dataclass
class RunContext:
    """What an operation's `run` gets from the platform: its scratch directory, how user paths resolve (relative to
    TP_DATA_DIR) and the operator's endpoints (built only when asked for)."""

    workdir: Path
    resolve: Callable[[str], Path] = Path
    endpoints: Callable[[], Any] = _no_endpoints
    executor: Any = None  # a data.executors.Executor, for operations whose `executors` name more than local


@dataclass
class OperationResult:
    file: Path  # the output file (it exists only once the whole operation succeeded)
    report: dict[str, Any]
    stats: dict[str, Any]
    format: str | None = None  # None: detected from the output rows


P = TypeVar("P", bound=BaseModel)


class Operation(Generic[P]):
    """One dataset operation. Subclass it as `Operation[MyParams]` and decorate with `@register_operation`; the
    class docstring is its description in `GET /datasets/operations`."""

    name: ClassVar[str]
    Params: ClassVar[type[BaseModel]]
    example: ClassVar[dict[str, Any]] = {}  # the params the UI's form starts from
    example_by_format: ClassVar[dict[str, dict[str, Any]]] = {}  # ... when the input version has this format
    executors: ClassVar[tuple[str, ...]] = ("local",)  # where it can run (data/executors/): ray = Ray Data

    def check(self, params: P, out: dict[str, Any], ctx: CheckContext) -> FieldErrors:
        """Checks beyond the Params model's own: [(loc, msg)], locs under `params.`. May normalise `out` (the params
        dumped as JSON: what the job runs and the version's lineage records) in place; idempotently, as the worker
        checks the job's (normalised) params again."""
        return []

    def paths(self, params: P) -> Iterator[tuple[str, str, Any]]:
        """User paths beyond the marked fields of `Params` (those are found by the schema walk), as
        (loc relative to `params`, value, marker)."""
        return iter(())

    def needs_transformers(self, params: dict[str, Any]) -> bool:
        """Whether `run` imports transformers (the worker then waits for its warm-up import: not thread-safe)."""
        return False

    def output_path(self, source: Path, workdir: Path, params: dict[str, Any]) -> Path:
        """Where `run` writes: JSONL or Parquet as the input (.json/.csv inputs come out as JSONL)."""
        suffix = source.suffix.lower()
        return workdir / f"output{suffix if suffix in ('.jsonl', '.parquet') else '.jsonl'}"

    def run(self, params: dict[str, Any], source: Path, output: Path, ctx: RunContext) -> OperationResult:
        """Run on `source` into `output` with the validated, normalised params (from `check`). Domain errors
        (DatasetError, RecipeError, ValueError) propagate."""
        raise NotImplementedError

    @classmethod
    def description(cls) -> str:
        return " ".join((cls.__doc__ or cls.Params.__doc__ or "").split())


OPERATIONS: dict[str, Operation[Any]] = {}

OpT = TypeVar("OpT", bound=type[Operation[Any]])


def register_operation(name: str, params: type[BaseModel]) -> Callable[[OpT], OpT]:
    """Register an operation class under `name` with its params model (one instance serves every job)."""

    def decorate(cls: OpT) -> OpT:
        if name in OPERATIONS:
            raise ValueError(f"dataset operation {name!r} is registered twice")
        cls.name = name
        cls.Params = params
        OPERATIONS[name] = cls()
        return cls

    return decorate


def unregister_operation(name: str) -> None:
    """Remove an operation (tests that register their own)."""
    OPERATIONS.pop(name, None)


def operation_names() -> list[str]:
    return list(OPERATIONS)


def get_operation(name: str) -> Operation[Any]:
    """The registered operation; KeyError naming the valid ones."""
    try:
        return OPERATIONS[name]
    except KeyError:
        raise KeyError(f"unknown operation {name!r}; use one of {', '.join(OPERATIONS)}") from None


def params_model(
    name: str,
    config: type,
    *,
    exclude: tuple[str, ...] = (),
    extra: dict[str, Any] | None = None,
    doc: str | None = None,
) -> type[OperationParams]:
    """An `OperationParams` model from a data-factory config dataclass: its fields, types (with their `Annotated`
    bounds) and defaults, less `exclude`, plus `extra` ({name: (type, default or Field)}): the config stays the one
    place that says what the parameters are."""
    hints = _type_hints(config)
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        if f.name in exclude:
            continue
        if f.default is not dataclasses.MISSING:
            fields[f.name] = (hints[f.name], f.default)
        elif f.default_factory is not dataclasses.MISSING:
            fields[f.name] = (hints[f.name], Field(default_factory=f.default_factory))
        else:
            fields[f.name] = (hints[f.name], ...)
    fields.update(extra or {})
    return create_model(name, __base__=OperationParams, __doc__=doc, **fields)


def _type_hints(cls: type) -> dict[str, Any]:
    import sys
    from typing import get_type_hints

    return get_type_hints(cls, globalns=vars(sys.modules[cls.__module__]), include_extras=True)


def jsonable(obj: Any) -> Any:
    """Reports from the domain code may hold numpy scalars/arrays and Paths: make them plain JSON."""

    def default(value: Any) -> Any:
        if hasattr(value, "tolist"):  # numpy scalars and arrays
            return value.tolist()
        if isinstance(value, Path | set | tuple):
            return str(value) if isinstance(value, Path) else list(value)
        return str(value)

    return json.loads(json.dumps(obj, default=default, ensure_ascii=False))

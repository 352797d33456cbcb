"""Dataset operations over the platform: validate an operation's params for a user (before its `data` job is queued,
and again in the worker for the job's owner), list its paths for the path policy, run it on a stored version's file.

The operations themselves are the data factory's registry (`training_platform.data.operations`: one module per
operation with its Params, checks and run function); this module knows none of them by name. What an operation
needs from the platform reaches it through its context: the path policy and TP_DATA_DIR (`CheckContext.path_problem`,
`RunContext.resolve`) and the operator's endpoints (`CheckContext.endpoint_errors`, `RunContext.endpoints`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from sqlmodel import Session

from training_platform.core.errors import InvalidInput, pydantic_errors
from training_platform.core.path_policy import Reader, check_marked, check_path, is_hub_id, resolve_path, shown
from training_platform.core.settings import Settings
from training_platform.core.userpath import user_paths
from training_platform.data.operations import (
    OPERATIONS,
    CheckContext,
    FieldErrors,
    PathKind,
    RunContext,
    get_operation,
    jsonable,
)
from training_platform.db.models import Dataset, DatasetVersionRecord, Job, User

log = logging.getLogger("training_platform.datasets")


class OperationInvalid(InvalidInput):
    """Bad operation parameters: [(loc, msg)] with locs like `params.recipe.operators[0].unit`."""


class _ParamsByName(Mapping[str, type[BaseModel]]):
    """Operation name -> its params model, read live from the registry."""

    def __getitem__(self, name: str) -> type[BaseModel]:
        return OPERATIONS[name].Params

    def __iter__(self) -> Iterator[str]:
        return iter(OPERATIONS)

    def __len__(self) -> int:
        return len(OPERATIONS)


PARAMS: Mapping[str, type[BaseModel]] = _ParamsByName()


def operation_names() -> list[str]:
    return list(OPERATIONS)


def unknown_operation(operation: Any) -> str:
    return f"unknown operation {operation!r}; use one of {', '.join(OPERATIONS)}"


def describe_operations() -> dict[str, dict[str, Any]]:
    """`GET /datasets/operations`: each operation's description, the JSON Schema of its params (defaults included)
    and the example params the UI starts from (`example_by_format`: when the input version has that format)."""
    return {
        name: {
            "params_schema": op.Params.model_json_schema(),
            "description": op.description(),
            "example": op.example,
            "example_by_format": op.example_by_format,
        }
        for name, op in OPERATIONS.items()
    }


def _pydantic_errors(exc: ValidationError, model: type[BaseModel]) -> list[tuple[str, str]]:
    return [
        (e.path, f"unknown parameter; use {', '.join(model.model_fields)}")
        if e.reason.startswith("unknown field")
        else e
        for e in pydantic_errors(exc, prefix="params", known_fields=model.model_fields)
    ]


def _path_problem(settings: Settings, reader: Reader):
    def problem(loc: str, value: str, kind: PathKind) -> str | None:
        if kind == "model":
            if is_hub_id(value, settings):
                return None
            kind = "dir"
        error = check_path(loc, value, settings, reader)
        if error is not None:
            return error.reason
        path = resolve_path(value, settings)
        if kind == "file" and not path.is_file():
            return f"no such file: {shown(value, settings)}"
        if kind == "dir" and not path.is_dir():
            return f"no such directory: {shown(value, settings)}"
        return None

    return problem


def _endpoint_errors(settings: Settings):
    def errors(loc: str, judge: Any) -> FieldErrors:
        """The judge's endpoint known (operator's or admin-defined) and serving its model."""
        from training_platform.core.endpoints import EndpointConfigError, EndpointError
        from training_platform.db.endpoints_crud import worker_resolver

        try:
            worker_resolver(settings).resolve(judge.endpoint, judge.model, field="endpoint", model_field="model")
        except EndpointConfigError as exc:
            log.error("endpoint configuration: %s", exc)
            return [(f"{loc}.endpoint", "the operator's endpoint configuration is invalid; ask them to fix it")]
        except EndpointError as exc:
            return [(f"{loc}.{exc.field or 'endpoint'}", str(exc))]
        return []

    return errors


def operation_paths(operation: str, params: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """Every path field of validated, normalised operation params (the fields marked in its Params model, plus what
    the operation lists itself, e.g. a clean recipe's operators), as (loc, value, marker)."""
    op = get_operation(operation)
    parsed = op.Params.model_validate(params)
    found = [(f"params.{loc}", value, marker) for loc, value, marker in user_paths(parsed)]
    return found + [(f"params.{loc}", value, marker) for loc, value, marker in op.paths(parsed)]


def validate_operation(
    operation: str, params: Any, settings: Settings, *, reader: Reader, input_format: str | None = None
) -> dict[str, Any]:
    """Check an operation's parameters before a job is queued (and again in the worker, for the job's owner).
    Returns them normalised (defaults filled in; a clean recipe in its full form), which is what the job runs and
    what the version's lineage records. Every path (see `operation_paths`) must be readable by `reader`. Raises
    OperationInvalid listing every problem as (loc, msg)."""
    if not isinstance(operation, str) or operation not in OPERATIONS:
        raise OperationInvalid([("operation", unknown_operation(operation))])
    if not isinstance(params, dict):
        raise OperationInvalid([("params", f"must be an object, got {type(params).__name__}")])
    op = OPERATIONS[operation]
    try:
        parsed = op.Params.model_validate(params)
    except ValidationError as exc:
        raise OperationInvalid(_pydantic_errors(exc, op.Params)) from None
    out = parsed.model_dump(mode="json")
    ctx = CheckContext(
        input_format=input_format,
        path_problem=_path_problem(settings, reader),
        endpoint_errors=_endpoint_errors(settings),
    )
    errors = list(op.check(parsed, out, ctx))
    if not errors:  # every marked field, whatever the checks above covered (a new field cannot slip past)
        errors += [(e.path, e.reason) for e in check_marked(operation_paths(operation, out), settings, reader)]
    if errors:
        raise OperationInvalid(errors)
    return out


def resolve_executor(operation: str, requested: str, rows: int | None, settings: Settings) -> str:
    """Where the operation runs: `local` or `ray` (Ray Data on TP_RAY_ADDRESS). `auto`: ray when the platform has a
    cluster that answers, the operation runs on Ray and the input has more than TP_RAY_MIN_ROWS rows; else local.
    An explicit `ray` that cannot be honoured is refused (OperationInvalid at `executor`)."""
    from training_platform.data.executors import ExecutorError
    from training_platform.data.executors.ray_data import check_reachable

    if requested == "local":
        return "local"
    op = get_operation(operation)
    if requested == "auto":
        if "ray" not in op.executors or not settings.ray_address or (rows or 0) <= settings.ray_min_rows:
            return "local"
        try:
            check_reachable(settings.ray_address)
        except ExecutorError:
            log.warning("executor auto: the Ray cluster at %s does not answer; running locally", settings.ray_address)
            return "local"
        return "ray"
    if requested != "ray":
        raise OperationInvalid([("executor", f"must be auto, local or ray, got {requested!r}")])
    if "ray" not in op.executors:
        on_ray = ", ".join(name for name, o in OPERATIONS.items() if "ray" in o.executors)
        raise OperationInvalid([("executor", f"{operation} runs locally only; on ray: {on_ray}")])
    if not settings.ray_address:
        raise OperationInvalid([("executor", "ray needs a Ray cluster and the platform has none (TP_RAY_ADDRESS)")])
    try:
        check_reachable(settings.ray_address)
    except ExecutorError as exc:
        raise OperationInvalid([("executor", str(exc).removeprefix("executor: "))]) from None
    return "ray"


def queue_operation(
    session: Session,
    user: User,
    dataset: Dataset,
    version: DatasetVersionRecord,
    operation: str,
    params: Any,
    settings: Settings,
    *,
    reader: Reader,
    name: str | None = None,
    priority: int = 0,
    executor: str = "auto",
) -> Job:
    """Validate the params for `reader` (OperationInvalid) and queue the operation on `version` as a `data` job
    (committed; the caller sends the wake-up). `executor` is resolved now (`resolve_executor`) and stored."""
    from training_platform.db import crud

    checked = validate_operation(operation, params, settings, reader=reader, input_format=version.format)
    where = resolve_executor(operation, executor, version.rows, settings)
    config = {
        "dataset_id": dataset.id,
        "version_id": version.id,
        "operation": operation,
        "params": checked,
        "executor": where,
    }
    job_name = name or f"{operation} {dataset.name} v{version.id}"[:200]
    job = crud.create_job(session, owner=user, name=job_name, config=config, priority=priority, kind="data")
    job.algorithm = operation
    job.max_steps = 100  # progress in percent
    session.add(job)
    session.commit()
    log.info("data job %s: %s on dataset %s version %s by %s", job.id, operation, dataset.id, version.id, user.name)
    return job


def needs_transformers(operation: str, params: dict[str, Any]) -> bool:
    """transformers' lazy imports are not thread-safe: the worker waits for its warm-up import before such a run."""
    return operation in OPERATIONS and OPERATIONS[operation].needs_transformers(params)


@dataclass
class OperationOutput:
    file: Path
    suffix: str
    report: dict[str, Any]
    stats: dict[str, Any]
    format: str | None = None  # None: detected from the output rows


def run_operation(
    operation: str,
    params: dict[str, Any],
    source: Path,
    workdir: Path,
    settings: Settings,
    executor: str = "local",
    on_progress: Any = None,
) -> OperationOutput:
    """Run one operation on `source` into `workdir`, with params from `validate_operation`: in this process, or as
    the driver of Ray Data stages (`executor: ray`, the cluster of TP_RAY_ADDRESS; `on_progress(event)` gets the
    blocks done, overall and per Ray worker). Domain errors (DatasetError, RecipeError, ValueError) propagate; the
    output file appears only when the whole operation succeeded."""
    from training_platform.data.executors import get_executor

    op = get_operation(operation)
    runner = get_executor(executor, address=settings.ray_address) if executor != "local" else None
    if runner is not None:
        runner.on_progress = on_progress

    def endpoints() -> Any:
        from training_platform.db.endpoints_crud import worker_resolver

        return worker_resolver(settings)

    ctx = RunContext(
        workdir=workdir, resolve=lambda value: resolve_path(value, settings), endpoints=endpoints, executor=runner
    )
    result = op.run(params, source, op.output_path(source, workdir, params), ctx)
    if not result.file.is_file():
        raise RuntimeError(f"{operation} produced no output file")
    report = jsonable(result.report)
    for key in ("input", "output", "version"):  # temp paths and the domain's own version record: ours replaces them
        report.pop(key, None)
    if isinstance(report.get("filter"), dict):
        for key in ("input", "output"):
            report["filter"].pop(key, None)
    return OperationOutput(
        file=result.file, suffix=result.file.suffix, report=report, stats=jsonable(result.stats), format=result.format
    )

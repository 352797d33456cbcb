"""Evaluations: run benchmarks on a model or a training job's checkpoint, as `eval` jobs on the `eval` queue.

An evaluation's id is its job's id: status, progress (`current_step` 0..100), events, logs, cancel, retry and
delete are the /jobs endpoints'. Results: summary metrics with stderr and 95% CI per benchmark, per-sample records
(paginated, filterable by correctness), reports, a sample-by-sample comparison of two evaluations, and a
leaderboard across models and checkpoints per benchmark.

Where it runs (`executor`: auto | local | ray, and `workers`) is decided at submission: "auto" made concrete
(services/evaluations.py, `resolve_executor`), ray refused naming `executor` when the platform has no Ray cluster
or it does not answer. Reads show `executor` (name, workers, and on ray each worker's progress).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query, status
from fastapi.responses import FileResponse
from pydantic import BaseModel, Field
from sqlalchemy import ColumnElement, func
from sqlmodel import Session, col, select

from training_platform.api import errors, schemas
from training_platform.api.deps import CurrentUser, JsonBody, SessionDep, SettingsDep
from training_platform.api.errors import ValidationFailed, not_found
from training_platform.core.settings import Settings
from training_platform.db.models import EvalSample, Evaluation, Job, JobStatus, User, row_id
from training_platform.evaluation.request import EvalRequest, RequestError, request_json_schema
from training_platform.services import evaluations as eval_service
from training_platform.services.access import reader_for

log = logging.getLogger("training_platform.api.evaluations")

router = APIRouter(prefix="/evaluations", tags=["evaluations"])


# ---------------------------------------------------------------------------------------------- schemas


class EvaluationCreate(EvalRequest):
    """The model is one of: `model` (a registered model's name, a path under the allowed roots, a hub id, or, with
    `backend: {"backend": "openai", "endpoint": NAME}`, a model that named endpoint serves: GET /endpoints lists
    them) or `job_id` + `checkpoint` (a step, "latest" or "final") of a training job. Requests never give a URL or
    a key's variable (`backend.base_url`, `backend.api_key_env` are refused)."""

    name: schemas.JobName | None = None
    model: str | None = Field(None, max_length=4096)
    job_id: schemas.BodyId | None = None
    checkpoint: Annotated[int, Field(ge=0, le=schemas.DB_INT_MAX)] | Literal["latest", "final"] | None = Field(
        None, description='A step, "latest" (default with job_id) or "final".'
    )
    keep_best_by: str | None = Field(
        None,
        max_length=130,
        description='With job_id: update the job\'s best checkpoint by this metric, e.g. "gsm8k/accuracy".',
    )
    priority: schemas.Priority = 0


class MetricValue(BaseModel):
    value: float
    stderr: float | None
    ci95: list[float | None]
    n: int


class WorkerProgress(BaseModel):
    worker: int
    benchmark: str
    stage: str = Field(description="generate, score or loglikelihood")
    done: int
    total: int


class ExecutorRead(BaseModel):
    name: str = Field(description="local or ray")
    workers: int | None = Field(
        description="The workers it runs on (local: 1; ray: null until it runs when the cluster's default is used)."
    )
    requested: str | None = Field(description="What the request asked for: auto, local or ray.")
    reason: str | None = Field(description="Why (auto's choice).")
    progress: list[WorkerProgress] = Field(
        default_factory=list, description="ray: per worker and stage of its current benchmark, done / total."
    )


class EvaluationRead(BaseModel):
    id: int
    name: str
    owner: str
    status: str
    progress: int = Field(description="0..100")
    error: str | None
    model: str
    model_path: str
    source_job_id: int | None
    checkpoint_step: int | None
    schedule_id: int | None
    benchmarks: list[str]
    keep_best_by: str | None
    executor: ExecutorRead
    metrics: dict[str, MetricValue] = Field(description='"benchmark/metric" -> value, e.g. "gsm8k/accuracy".')
    created_at: schemas.UtcDatetime
    started_at: schemas.UtcDatetime | None
    finished_at: schemas.UtcDatetime | None


class EvaluationDetail(EvaluationRead):
    config: dict[str, Any]
    preflight: dict[str, Any] | None
    output_dir: str | None
    summary: dict[str, Any] | None = Field(
        description="Per benchmark: metrics, n_items, generation settings, data file + sha256, timings."
    )


class EvaluationSubmitted(EvaluationRead):
    warning: str | None = None


class SampleRead(BaseModel):
    benchmark: str
    position: int
    item_id: str
    sample_index: int
    correct: bool | None
    extracted: str | None
    reference: str | None
    output: str
    prompt: str
    latency_s: float | None
    extra: dict[str, Any]


class LeaderboardEntry(BaseModel):
    rank: int
    evaluation_id: int
    model: str
    model_path: str
    source_job_id: int | None
    checkpoint_step: int | None
    value: float
    stderr: float | None
    ci95: list[float | None]
    n: int
    data_sha256: str | None = Field(description="Compare entries evaluated on the same data only.")
    evaluated_at: schemas.UtcDatetime | None


class Leaderboard(schemas.Page[LeaderboardEntry]):
    benchmark: str
    metric: str


class BenchmarkInfo(BaseModel):
    name: str
    kind: str = Field(description="generate (sample and score) or loglikelihood (rank the choices)")
    primary_metric: str = Field(description="The leaderboard's default metric.")
    bundled_data: bool = Field(description="False: the request must name a local data file for it.")
    data_help: str = Field(description="What its data file holds.")


# ---------------------------------------------------------------------------------------------- helpers


def _visible(session: Session, user: User, evaluation_id: int) -> tuple[Evaluation, Job]:
    evaluation = session.get(Evaluation, evaluation_id)
    job = session.get(Job, evaluation_id) if evaluation is not None else None
    if evaluation is None or job is None or not (user.is_admin or job.owner_id == user.id):
        raise not_found(f"evaluation {evaluation_id}")
    return evaluation, job


def _executor(evaluation: Evaluation, job: Job) -> dict[str, Any]:
    """Where it runs: as chosen at submission (the job's config), with what the run reports (the workers it
    started, their progress) once it does. Evaluations from before executors ran locally."""
    chosen = (job.config or {}).get("executor") or {}
    ran = (evaluation.summary or {}).get("executor") or {}
    name = str(ran.get("name") or chosen.get("name") or "local")
    return {
        "name": name,
        "workers": 1 if name == "local" else ran.get("workers") or chosen.get("workers"),
        "requested": chosen.get("requested"),
        "reason": chosen.get("reason"),
        "progress": ran.get("progress") or [],
    }


def _read(
    session: Session,
    evaluation: Evaluation,
    job: Job,
    metrics: dict | None = None,
    owner_name: str | None = None,
    detail: bool = False,
) -> dict[str, Any]:
    if owner_name is None:
        owner = session.get(User, job.owner_id)
        owner_name = owner.name if owner is not None else f"#{job.owner_id}"
    if metrics is None:
        job_id = row_id(job)
        metrics = eval_service.metrics_of(session, [job_id])[job_id]
    data = {
        "id": job.id,
        "name": job.name,
        "owner": owner_name,
        "status": job.status,
        "progress": job.current_step,
        "error": job.error,
        "model": evaluation.model_label,
        "model_path": evaluation.model_path,
        "source_job_id": evaluation.source_job_id,
        "checkpoint_step": evaluation.checkpoint_step,
        "schedule_id": evaluation.schedule_id,
        "benchmarks": evaluation.benchmarks,
        "keep_best_by": evaluation.keep_best_by,
        "executor": _executor(evaluation, job),
        "metrics": metrics,
        "created_at": job.created_at,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
    }
    if detail:
        data.update(
            config=(job.config or {}).get("eval") or {},
            preflight=job.preflight,
            output_dir=evaluation.output_dir,
            summary=evaluation.summary,
        )
    return data


def _request_failed(exc: RequestError) -> ValidationFailed:
    return ValidationFailed(exc.errors)


def build_evaluation(session: Session, user: User, body: EvaluationCreate, settings: Settings):
    """Validate everything a submission names; returns (EvalConfig, Target, ExecutorChoice). RequestError lists
    every problem."""
    errors: list[tuple[str, str]] = []
    target = None
    try:
        target = eval_service.resolve_target(
            session,
            user,
            model=body.model,
            job_id=body.job_id,
            checkpoint=body.checkpoint,
            backend=str(body.backend.get("backend", "transformers")),
            settings=settings,
        )
    except RequestError as exc:
        errors += exc.errors
    config, problems = eval_service.check_request(
        body,
        target.model_path if target else "<unresolved>",
        settings,
        keep_best_by=body.keep_best_by,
        job_id=body.job_id,
        name=body.name,
        session=session,
        reader=reader_for(session, user),
    )
    errors += problems
    choice = None
    if config is not None:
        config = eval_service.absolute_data_paths(config, settings)
        # auto counts the data files' rows: only once they are known to be files this user may read
        if body.executor != "auto" or not any(loc.startswith("benchmarks") for loc, _ in errors):
            choice, executor_errors = eval_service.resolve_executor(body, config, settings)
            errors += executor_errors
    if errors:
        raise RequestError(errors)
    assert config is not None and choice is not None  # no config / choice only along with the problems why
    return config, target, choice


# ---------------------------------------------------------------------------------------------- endpoints


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=EvaluationSubmitted,
    dependencies=[JsonBody],
    responses={422: {"model": schemas.ErrorOut, "description": "Every problem with the request"}},
)
def create_evaluation(body: EvaluationCreate, session: SessionDep, user: CurrentUser, settings: SettingsDep):
    """Queue an evaluation. Everything checkable now is checked (benchmarks, generation settings, the model or
    checkpoint, data paths, `keep_best_by`); the worker's preflight loads the data and checks every row."""
    from training_platform.api.routes.jobs import wake

    try:
        config, target, executor = build_evaluation(session, user, body, settings)
    except RequestError as exc:
        raise _request_failed(exc) from None
    request = body.model_dump(mode="json", include=set(EvalRequest.model_fields))
    job = eval_service.create_evaluation(
        session,
        owner=user,
        name=body.name,
        config=config,
        target=target,
        priority=body.priority,
        keep_best_by=body.keep_best_by,
        request=request,
        executor=executor,
    )
    session.commit()
    log.info(
        "evaluation %s submitted by %s: %s on %s",
        job.id,
        user.name,
        target.label,
        ", ".join(b.name for b in config.benchmarks),
    )
    evaluation = session.get(Evaluation, job.id)
    assert evaluation is not None  # created with its job by create_evaluation, just committed
    return {
        **_read(session, evaluation, job, metrics={}, owner_name=user.name),
        "warning": wake("eval", body.priority, row_id(job)),
    }


@router.get("", response_model=schemas.Page[EvaluationRead])
def list_evaluations(
    session: SessionDep,
    user: CurrentUser,
    status_: Annotated[list[JobStatus] | None, Query(alias="status", description="Repeatable.")] = None,
    job_id: Annotated[int | None, schemas.id_query("Evaluations of this training job's checkpoints.")] = None,
    schedule_id: Annotated[int | None, schemas.id_query()] = None,
    benchmark: Annotated[str | None, Query(max_length=64)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    offset: schemas.Offset = 0,
):
    conditions: list[ColumnElement[bool]] = []
    if not user.is_admin:
        conditions.append(col(Job.owner_id) == user.id)
    if status_:
        conditions.append(col(Job.status).in_([s.value for s in status_]))
    if job_id is not None:
        conditions.append(col(Evaluation.source_job_id) == job_id)
    if schedule_id is not None:
        conditions.append(col(Evaluation.schedule_id) == schedule_id)
    base = (
        select(Evaluation, Job, User.name)
        .join(Job, col(Job.id) == Evaluation.job_id)
        .join(User, col(User.id) == Job.owner_id)
        .where(*conditions)
    )
    page: Sequence[tuple[Evaluation, Job, str]]
    if benchmark:  # a JSON list column: filtered here (portable across SQLite and PostgreSQL)
        rows = [
            r for r in session.exec(base.order_by(col(Job.id).desc())).all() if benchmark in (r[0].benchmarks or [])
        ]
        total, page = len(rows), rows[offset : offset + limit]
    else:
        total = session.exec(select(func.count()).select_from(base.subquery())).one()
        page = session.exec(base.order_by(col(Job.id).desc()).limit(limit).offset(offset)).all()
    metrics = eval_service.metrics_of(session, [row_id(job) for _, job, _ in page])
    return {
        "items": [_read(session, e, j, metrics[row_id(j)], owner) for e, j, owner in page],
        "total": total,
        "limit": limit,
        "offset": offset,
    }


@router.get("/benchmarks", response_model=list[BenchmarkInfo])
def list_benchmarks(user: CurrentUser):
    """The registered benchmarks (the UI's pickers read them, so a new benchmark needs no front-end change)."""
    from training_platform.evaluation.benchmarks import BENCHMARKS, Benchmark

    return [
        BenchmarkInfo(
            name=name,
            kind=cls.kind,
            primary_metric=cls.primary_metric,
            bundled_data=cls.default_data is not Benchmark.default_data,
            data_help=cls.data_help,
        )
        for name, cls in sorted(BENCHMARKS.items())
    ]


@lru_cache
def _schema() -> dict[str, Any]:
    return request_json_schema(EvaluationCreate)


@router.get("/schema")
def evaluation_schema(user: CurrentUser) -> dict[str, Any]:
    """The JSON Schema of POST /evaluations' body (the UI generates its form from it): each registered benchmark's
    own options under `benchmarks` (discriminated by `name`), the generation defaults with their bounds."""
    return _schema()


@router.get("/leaderboard", response_model=Leaderboard)
def leaderboard(
    session: SessionDep,
    user: CurrentUser,
    benchmark: Annotated[str, Query(max_length=64, description="e.g. gsm8k")],
    metric: Annotated[
        str | None,
        Query(max_length=64, description="Default: the benchmark's primary metric (accuracy; humaneval: pass@1)."),
    ] = None,
    job_id: Annotated[int | None, schemas.id_query("Only this training job's checkpoints.")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: schemas.Offset = 0,
):
    """Models and checkpoints ranked by their latest succeeded evaluation on `benchmark` (higher is better)."""
    from training_platform.evaluation.benchmarks import BENCHMARKS

    if benchmark not in BENCHMARKS:
        raise ValidationFailed(
            [("query.benchmark", f"unknown benchmark {benchmark!r}; known: {', '.join(sorted(BENCHMARKS))}")]
        )
    metric = metric or BENCHMARKS[benchmark].primary_metric
    entries = eval_service.leaderboard(session, user, benchmark, metric, job_id=job_id)
    return {
        "items": entries[offset : offset + limit],
        "total": len(entries),
        "limit": limit,
        "offset": offset,
        "benchmark": benchmark,
        "metric": metric,
    }


@router.get("/compare", responses=errors.responses(404, 409))
def compare(
    session: SessionDep,
    user: CurrentUser,
    a: Annotated[int, schemas.id_query("Evaluation A (the baseline).")],
    b: Annotated[int, schemas.id_query("Evaluation B.")],
    max_items: Annotated[int, Query(ge=0, le=1000, description="Flipped items listed per direction.")] = 50,
):
    """Sample by sample: per benchmark both have, the paired difference (stderr), McNemar p-value and the items
    that flipped (`fixed`: wrong in A, right in B; `broken`: the reverse)."""
    from training_platform.evaluation.compare import compare_runs

    dirs = []
    for key, evaluation_id in (("a", a), ("b", b)):
        evaluation, job = _visible(session, user, evaluation_id)
        if job.status != JobStatus.succeeded.value or not evaluation.output_dir:
            raise HTTPException(
                status.HTTP_409_CONFLICT,
                detail=f"evaluation {evaluation_id} ({key}) has no results (it is {job.status})",
            )
        dirs.append(evaluation.output_dir)
    try:
        result = compare_runs(dirs[0], dirs[1])
    except (OSError, ValueError) as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, detail=f"cannot compare: {exc}") from None
    for bench in (result.get("benchmarks") or {}).values():  # the totals are in bench["counts"]
        for direction in ("fixed", "broken"):
            bench[direction] = bench[direction][:max_items]
    result["a"]["evaluation_id"], result["b"]["evaluation_id"] = a, b
    return result


@router.get("/{evaluation_id}", response_model=EvaluationDetail)
def get_evaluation(evaluation_id: schemas.DbId, session: SessionDep, user: CurrentUser):
    evaluation, job = _visible(session, user, evaluation_id)
    return _read(session, evaluation, job, detail=True)


@router.get("/{evaluation_id}/samples", response_model=schemas.Page[SampleRead])
def evaluation_samples(
    evaluation_id: schemas.DbId,
    session: SessionDep,
    user: CurrentUser,
    benchmark: Annotated[str | None, Query(max_length=64)] = None,
    correct: Annotated[bool | None, Query(description="Only right (true) or wrong (false) samples.")] = None,
    item_id: Annotated[str | None, Query(max_length=300)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: schemas.Offset = 0,
):
    """Per-sample records: prompt, raw output, extracted answer, reference, correct, latency (+ benchmark
    fields such as the strict/flexible extractions or the sandbox result), in benchmark file order."""
    _visible(session, user, evaluation_id)
    conditions = [EvalSample.job_id == evaluation_id]
    if benchmark:
        conditions.append(EvalSample.benchmark == benchmark)
    if correct is not None:
        conditions.append(EvalSample.correct == correct)
    if item_id is not None:
        conditions.append(EvalSample.item_id == item_id)
    total = session.exec(select(func.count()).select_from(EvalSample).where(*conditions)).one()
    rows = session.exec(
        select(EvalSample)
        .where(*conditions)
        .order_by(col(EvalSample.benchmark), col(EvalSample.position))
        .limit(limit)
        .offset(offset)
    ).all()
    return {"items": rows, "total": total, "limit": limit, "offset": offset}


@router.get(
    "/{evaluation_id}/report",
    response_class=FileResponse,
    responses={200: {"content": {"text/html": {}, "text/markdown": {}}}},
)
def evaluation_report(
    evaluation_id: schemas.DbId,
    session: SessionDep,
    user: CurrentUser,
    format: Annotated[Literal["html", "md"], Query()] = "html",
):  # noqa: A002 - the query name
    """The static report with per-sample drill-down (written when the evaluation finished)."""
    evaluation, job = _visible(session, user, evaluation_id)
    path = Path(evaluation.output_dir or "") / f"report.{format}"
    if not evaluation.output_dir or not path.is_file():
        raise not_found(f"report of evaluation {evaluation_id} (status {job.status})")
    media = "text/html" if format == "html" else "text/markdown"
    return FileResponse(path, media_type=media)

"""Data access for evaluations, shared by the API, the eval worker and the schedule firing.

- `resolve_target`: what model an evaluation runs on (a registered model, a path, a hub id, a served model name,
  or a training job's checkpoint / final model), with the same path policy as training jobs.
- `resolve_executor`, `record_worker_progress` (services/eval_executors.py, re-exported): where it runs.
- `create_evaluation`: an `eval` job + its `evaluations` row (evaluation id == job id); pins a checkpoint so the
  training run's rotation keeps it until the evaluation ran. The job's config records the executor chosen.
- `store_results`: a finished run's summary metrics and per-sample records into the database.
- `update_best_checkpoint`: the best checkpoint of a training job by a metric such as "gsm8k/accuracy", recorded on
  the job and pinned (kept beyond `keep_last_checkpoints`).
- `leaderboard`, `checkpoint_results` (`checkpoint_results_of`: several jobs at once), `delete_evaluation_rows`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import delete
from sqlmodel import Session, col, select

from training_platform.core.endpoints import EndpointConfigError, EndpointError, Endpoints
from training_platform.core.path_policy import Reader, check_model_paths, check_path, is_hub_id, resolve_path, shown
from training_platform.core.settings import Settings
from training_platform.db import crud
from training_platform.db.models import (
    Checkpoint,
    EvalMetric,
    EvalSample,
    Evaluation,
    Job,
    JobStatus,
    User,
    row_id,
)
from training_platform.evaluation.config import EvalConfig
from training_platform.evaluation.request import EvalRequest, RequestError, parse_metric_key
from training_platform.services.access import reader_for, visible_model_by_name
from training_platform.services.eval_executors import (  # noqa: F401 - re-exported: callers name them here
    ExecutorChoice,
    choose_executor,
    count_items,
    job_launcher,
    ray_problem,
    record_worker_progress,
    resolve_executor,
)

log = logging.getLogger("training_platform.evaluation")

SAMPLE_INSERT_CHUNK = 2000
BEST_PIN = "best"


def eval_pin(job_id: int) -> str:
    """The pin holder name of eval job `job_id` (see RunDir.pin)."""
    return f"eval-{job_id}"


@dataclass
class Target:
    model_path: str
    label: str
    source_job_id: int | None = None
    checkpoint_step: int | None = None  # with a source job: None = its final model
    run_dir: str | None = None  # the source job's run directory (for pins)


# ---------------------------------------------------------------------------------------------- the model


def resolve_target(
    session: Session,
    user: User,
    *,
    model: str | None,
    job_id: int | None,
    checkpoint: int | str | None,
    backend: str,
    settings: Settings,
    loc: str = "",
) -> Target:
    """The model to evaluate; RequestError with field paths (`model`, `job_id`, `checkpoint`) otherwise."""
    if (model is None) == (job_id is None):
        raise RequestError(
            [
                (
                    f"{loc}model",
                    "give either `model` (a registered model, a path or a hub id) or "
                    "`job_id` (+ `checkpoint`) of a training job",
                )
            ]
        )
    if model is not None:
        if checkpoint is not None:
            raise RequestError([(f"{loc}checkpoint", "`checkpoint` goes with `job_id`, not with `model`")])
        return _model_target(session, user, model, backend, settings, loc)
    assert job_id is not None  # exactly one of model and job_id (checked above)
    return _checkpoint_target(session, user, job_id, "latest" if checkpoint is None else checkpoint, loc)


def _model_target(session: Session, user: User, model: str, backend: str, settings: Settings, loc: str) -> Target:
    if not model.strip():
        raise RequestError([(f"{loc}model", "must not be empty")])
    if backend == "openai":  # the name the endpoint serves; nothing local
        return Target(model_path=model, label=model)
    registered = visible_model_by_name(session, user, model)
    if registered is not None:
        path, label = registered.path, model
    elif is_hub_id(model, settings):
        return Target(model_path=model, label=model)
    else:
        path, label = model, model
    error = check_path(f"{loc}model", path, settings, reader_for(session, user))
    if error is not None:
        reason = f"registered model {model!r}: {error.reason}" if registered is not None else error.reason
        raise RequestError([(error.path, reason)])
    resolved = resolve_path(path, settings)
    if not resolved.is_dir():
        raise RequestError([(f"{loc}model", f"no model directory at {shown(resolved, settings)}")])
    return Target(model_path=str(resolved), label=label)


def _checkpoint_target(session: Session, user: User, job_id: int, checkpoint: int | str, loc: str) -> Target:
    job = session.get(Job, job_id)
    if job is None or not (user.is_admin or job.owner_id == user.id):
        raise RequestError([(f"{loc}job_id", f"job {job_id} not found")])
    if job.kind != "train":
        raise RequestError([(f"{loc}job_id", f"job {job_id} is a {job.kind} job; only training jobs have checkpoints")])
    live = session.exec(
        select(Checkpoint)
        .where(Checkpoint.job_id == job.id, Checkpoint.removed == False)  # noqa: E712
        .order_by(col(Checkpoint.step))
    ).all()
    label_base = f"{job.name} (job {job.id})"
    if checkpoint == "final":
        final = Path(job.run_dir or "") / "final"
        if job.status != JobStatus.succeeded.value or not job.run_dir or not final.is_dir():
            raise RequestError([(f"{loc}checkpoint", f"job {job.id} has no final model (status {job.status})")])
        return Target(
            model_path=str(final),
            label=f"{label_base} final",
            source_job_id=job.id,
            checkpoint_step=None,
            run_dir=job.run_dir,
        )
    chosen: Checkpoint | None
    if checkpoint == "latest":
        if not live:
            raise RequestError([(f"{loc}checkpoint", f"job {job.id} has no checkpoint yet")])
        chosen = live[-1]
    elif isinstance(checkpoint, int) and not isinstance(checkpoint, bool):
        chosen = next((c for c in live if c.step == checkpoint), None)
        if chosen is None:
            steps = ", ".join(str(c.step) for c in live) or "none"
            raise RequestError(
                [(f"{loc}checkpoint", f"job {job.id} has no checkpoint at step {checkpoint} (available: {steps})")]
            )
    else:
        raise RequestError([(f"{loc}checkpoint", f"expected a step number, 'latest' or 'final', got {checkpoint!r}")])
    if not Path(chosen.path).is_dir():
        raise RequestError([(f"{loc}checkpoint", f"checkpoint step {chosen.step} of job {job.id} is missing on disk")])
    return Target(
        model_path=chosen.path,
        label=f"{label_base} step {chosen.step}",
        source_job_id=job.id,
        checkpoint_step=chosen.step,
        run_dir=job.run_dir,
    )


def check_data_paths(config: EvalConfig, settings: Settings, reader: Reader) -> list[tuple[str, str]]:
    """Benchmark data files named in a request (every field marked as a path in BenchmarkSpec): in an area the
    user may read and present (rows are checked by the worker's preflight)."""
    from training_platform.evaluation.benchmarks import get_benchmark

    errors = []
    for i, spec in enumerate(config.benchmarks):
        if not spec.data and get_benchmark(spec).default_data() is None:
            errors.append((f"benchmarks.{i}.data", f"{spec.name} needs a local data file (nothing is downloaded)"))
        problems = check_model_paths(spec, settings, reader, prefix=f"benchmarks.{i}.")
        errors += [(e.path, e.reason) for e in problems]
        for field in ("data", "fewshot_data"):
            value = getattr(spec, field)
            if (
                value
                and f"benchmarks.{i}.{field}" not in {e.path for e in problems}
                and not resolve_path(value, settings).is_file()
            ):
                errors.append((f"benchmarks.{i}.{field}", f"no such file: {shown(value, settings)}"))
    return errors


def check_endpoint(
    config: EvalConfig, endpoints: Endpoints, *, job_id: int | None = None, loc: str = ""
) -> list[tuple[str, str]]:
    """An openai backend's endpoint: one the operator (or an admin) defined, serving the model asked for. Checked
    at submission, when a schedule fires and again by the worker."""
    if config.model.backend != "openai":
        return []
    if job_id is not None:
        return [
            (
                f"{loc}job_id",
                "an endpoint evaluates a model it serves: give `model` (the served model's name), "
                "not a training job's checkpoint",
            )
        ]
    try:
        endpoints.resolve(config.model.endpoint, config.model.path)
    except EndpointConfigError as exc:
        log.error("endpoint configuration: %s", exc)
        return [(f"{loc}backend.endpoint", "the operator's endpoint configuration is invalid; ask them to fix it")]
    except EndpointError as exc:
        field = {"endpoint": "backend.endpoint", "model": "model"}.get(exc.field or "", "backend.endpoint")
        return [(f"{loc}{field}", str(exc))]
    return []


def check_request(
    request: EvalRequest,
    model_path: str,
    settings: Settings,
    *,
    keep_best_by: str | None,
    job_id: int | None,
    reader: Reader,
    name: str | None = None,
    session: Session | None = None,
) -> tuple[EvalConfig | None, list[tuple[str, str]]]:
    """What POST /evaluations and POST /schedules both check about the evaluation asked for: operator-only
    settings, the EvalConfig it makes (with data paths inside the allowed roots and present, the endpoint known
    and serving the model) and `keep_best_by`. Returns (the config or None, every problem as (field path,
    reason))."""
    errors = request.operator_only_errors()
    config = None
    try:
        config = request.to_config(model_path, name=name)
    except RequestError as exc:
        errors += exc.errors
    if config is not None:
        if session is not None:
            from training_platform.db.endpoints_crud import resolver

            errors += check_endpoint(config, resolver(session, settings), job_id=job_id)
        errors += check_data_paths(config, settings, reader)
        if keep_best_by is not None:
            try:
                parse_metric_key(keep_best_by, config)
            except ValueError as exc:
                errors.append(("keep_best_by", str(exc)))
    if keep_best_by is not None and job_id is None:
        errors.append(("keep_best_by", "keeps the best checkpoint of a training job: needs job_id"))
    return config, errors


def absolute_data_paths(config: EvalConfig, settings: Settings) -> EvalConfig:
    """The config with relative data paths resolved against TP_DATA_DIR (the worker's cwd is not)."""
    benchmarks = []
    for spec in config.benchmarks:
        updates = {
            f: str(resolve_path(getattr(spec, f), settings)) for f in ("data", "fewshot_data") if getattr(spec, f)
        }
        benchmarks.append(spec.model_copy(update=updates))
    return config.model_copy(update={"benchmarks": benchmarks})


# ---------------------------------------------------------------------------------------------- the executor


def create_evaluation(
    session: Session,
    *,
    owner: User,
    name: str | None,
    config: EvalConfig,
    target: Target,
    priority: int = 0,
    schedule_id: int | None = None,
    keep_best_by: str | None = None,
    request: dict[str, Any] | None = None,
    executor: ExecutorChoice | None = None,
) -> Job:
    """The eval job (queued) and its evaluations row. Pins the checkpoint it evaluates. Flushes, not commits.
    `executor`: where it runs (None: local), recorded in the job's config and in its stored request ("auto"
    resolved: a retry runs where the first attempt did)."""
    benchmarks = [b.name for b in config.benchmarks]
    name = (name or f"eval {target.label}: {', '.join(benchmarks)}")[:200]
    executor = executor or ExecutorChoice(name="local", workers=None, requested="local", reason="asked for")
    if request is not None:
        request = {**request, "executor": executor.name, "workers": executor.workers}
    job_config = {
        "eval": config.model_dump(mode="json"),
        "request": request,
        "executor": executor.to_json(),
        "target": {
            "model_path": target.model_path,
            "label": target.label,
            "source_job_id": target.source_job_id,
            "checkpoint_step": target.checkpoint_step,
            "run_dir": target.run_dir,
        },
        "schedule_id": schedule_id,
        "keep_best_by": keep_best_by,
    }
    job = crud.create_job(session, owner=owner, name=name, config=job_config, priority=priority, kind="eval")
    job.algorithm = "eval"
    job.max_steps = 100  # progress in percent
    session.add(job)
    session.add(
        Evaluation(
            job_id=row_id(job),
            owner_id=row_id(owner),
            model_label=target.label[:300],
            model_path=target.model_path,
            source_job_id=target.source_job_id,
            checkpoint_step=target.checkpoint_step,
            schedule_id=schedule_id,
            benchmarks=benchmarks,
            keep_best_by=keep_best_by,
        )
    )
    session.flush()
    if target.run_dir and target.checkpoint_step is not None:
        from training_platform.training.rundir import RunDir

        try:
            RunDir(target.run_dir).pin(target.model_path, eval_pin(row_id(job)))
        except OSError as exc:  # the evaluation still runs if the checkpoint survives; say why it might not
            log.warning("eval job %s: cannot pin %s: %s", job.id, target.model_path, exc)
    return job


def release_pin(job: Job) -> None:
    """Drop the pin an eval job holds on its checkpoint (when it finished, or was deleted)."""
    from training_platform.training.rundir import RunDir

    run_dir = ((job.config or {}).get("target") or {}).get("run_dir")
    if run_dir:
        try:
            RunDir(run_dir).unpin_holder(eval_pin(row_id(job)))
        except OSError as exc:
            log.warning("eval job %s: cannot remove its pin in %s: %s", job.id, run_dir, exc)


# ---------------------------------------------------------------------------------------------- results


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


SAMPLE_COLUMNS = {
    "benchmark",
    "id",
    "sample_index",
    "prompt",
    "output",
    "extracted",
    "correct",
    "reference",
    "latency_s",
}


def sample_rows(job_id: int, benchmark: str, records: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for position, record in enumerate(records):
        correct = record.get("correct")
        latency = record.get("latency_s")
        yield {
            "job_id": job_id,
            "benchmark": benchmark,
            "position": position,
            "item_id": str(record.get("id"))[:300],
            "sample_index": int(record.get("sample_index") or 0),
            "correct": bool(correct) if isinstance(correct, bool | int) else None,
            "extracted": _text(record.get("extracted")),
            "reference": _text(record.get("reference")),
            "output": _text(record.get("output")) or "",
            "prompt": _text(record.get("prompt")) or "",
            "latency_s": float(latency) if isinstance(latency, int | float) else None,
            "extra": {k: v for k, v in record.items() if k not in SAMPLE_COLUMNS},
        }


def store_results(session: Session, job_id: int, out_dir: Path, summary: dict[str, Any]) -> int:
    """Summary metrics and every sample record of a finished run. Idempotent (a retry replaces). Returns the
    number of samples stored."""
    from training_platform.core.files import read_jsonl
    from training_platform.evaluation.report import SAMPLES_DIR

    delete_evaluation_results(session, job_id)
    stored = 0
    for benchmark, result in (summary.get("benchmarks") or {}).items():
        for metric, m in (result.get("metrics") or {}).items():
            ci = m.get("ci95") or [None, None]
            session.add(
                EvalMetric(
                    job_id=job_id,
                    benchmark=benchmark,
                    metric=metric,
                    value=float(m["value"]),
                    stderr=m.get("stderr"),
                    ci_low=ci[0],
                    ci_high=ci[1],
                    n=int(m.get("n") or 0),
                )
            )
        samples_file = out_dir / SAMPLES_DIR / f"{benchmark}.jsonl"
        rows = list(sample_rows(job_id, benchmark, read_jsonl(samples_file))) if samples_file.is_file() else []
        for start in range(0, len(rows), SAMPLE_INSERT_CHUNK):
            # SQLModel does not declare the `__table__` SQLAlchemy maps the model to
            samples = EvalSample.__table__  # type: ignore[attr-defined]
            session.execute(samples.insert(), rows[start : start + SAMPLE_INSERT_CHUNK])
        stored += len(rows)
    evaluation = session.get(Evaluation, job_id)
    if evaluation is not None:
        evaluation.summary = {k: v for k, v in summary.items() if k != "config"}
        evaluation.output_dir = str(out_dir)
        session.add(evaluation)
    session.flush()
    return stored


def delete_evaluation_results(session: Session, job_id: int) -> None:
    session.exec(delete(EvalSample).where(col(EvalSample.job_id) == job_id))
    session.exec(delete(EvalMetric).where(col(EvalMetric.job_id) == job_id))


def delete_evaluation_rows(session: Session, job_id: int) -> None:
    delete_evaluation_results(session, job_id)
    session.exec(delete(Evaluation).where(col(Evaluation.job_id) == job_id))


def metrics_of(session: Session, job_ids: list[int]) -> dict[int, dict[str, dict[str, Any]]]:
    """{eval job id: {"gsm8k/accuracy": {"value", "stderr", "ci95", "n"}}}."""
    out: dict[int, dict[str, dict[str, Any]]] = {i: {} for i in job_ids}
    if not job_ids:
        return out
    for m in session.exec(select(EvalMetric).where(col(EvalMetric.job_id).in_(job_ids))).all():
        out[m.job_id][f"{m.benchmark}/{m.metric}"] = {
            "value": m.value,
            "stderr": m.stderr,
            "ci95": [m.ci_low, m.ci_high],
            "n": m.n,
        }
    return out


def checkpoint_results(session: Session, source_job_id: int) -> dict[int, dict[str, Any]]:
    """Per checkpoint step of a training job: the latest succeeded evaluation's metrics and its id."""
    return checkpoint_results_of(session, [source_job_id])[source_job_id]


def checkpoint_results_of(session: Session, source_job_ids: list[int]) -> dict[int, dict[int, dict[str, Any]]]:
    """`checkpoint_results` of several training jobs in two queries: {job id: {step: {"evaluation_id",
    "metrics"}}}."""
    out: dict[int, dict[int, dict[str, Any]]] = {job_id: {} for job_id in source_job_ids}
    if not source_job_ids:
        return out
    rows = session.exec(
        select(Evaluation.source_job_id, Evaluation.job_id, Evaluation.checkpoint_step)
        .join(Job, col(Job.id) == Evaluation.job_id)
        .where(
            col(Evaluation.source_job_id).in_(source_job_ids),
            col(Evaluation.checkpoint_step).is_not(None),
            Job.status == JobStatus.succeeded.value,
        )
        .order_by(col(Evaluation.job_id))
    ).all()
    # later evaluations overwrite earlier ones (a step is never None: the query excludes those)
    latest: dict[int, dict[int, int]] = {}
    for source, eval_id, step in rows:
        if source is not None and step is not None:
            latest.setdefault(source, {})[step] = eval_id
    metrics = metrics_of(session, [eval_id for steps in latest.values() for eval_id in steps.values()])
    for source, steps in latest.items():
        out[source] = {
            step: {"evaluation_id": eval_id, "metrics": {k: v["value"] for k, v in metrics[eval_id].items()}}
            for step, eval_id in steps.items()
        }
    return out


# ---------------------------------------------------------------------------------------------- best checkpoint


def best_checkpoint(session: Session, source_job_id: int, metric_key: str) -> dict[str, Any] | None:
    """The best still-existing checkpoint of a training job by `metric_key` ("gsm8k/accuracy"), judged by each
    checkpoint's latest succeeded evaluation (what GET /jobs/{id}/checkpoints shows). Higher is better; the earliest
    step wins a tie. None when no live checkpoint has that metric. ValueError for a malformed key."""
    parse_metric_key(metric_key)
    live = {
        c.step: c
        for c in session.exec(
            select(Checkpoint).where(Checkpoint.job_id == source_job_id, Checkpoint.removed == False)  # noqa: E712
        ).all()
    }
    scored = [
        (r["metrics"][metric_key], step, r["evaluation_id"])
        for step, r in checkpoint_results(session, source_job_id).items()
        if metric_key in r["metrics"] and step in live
    ]
    if not scored:
        return None
    value, step, evaluation_id = max(scored, key=lambda s: (s[0], -s[1]))
    return {"metric": metric_key, "step": step, "value": value, "evaluation_id": evaluation_id, "path": live[step].path}


def update_best_checkpoint(session: Session, source_job_id: int, metric_key: str) -> dict[str, Any] | None:
    """Recompute the job's best checkpoint by `metric_key`, record it on the job and pin it so rotation keeps it
    (the previous best's pin goes). Returns the new best (None: nothing evaluated yet)."""
    from training_platform.training.rundir import RunDir

    job = session.get(Job, source_job_id)
    if job is None:
        return None
    best = best_checkpoint(session, source_job_id, metric_key)
    if best is None:
        return None
    previous = job.best_checkpoint or {}
    job.best_checkpoint = best
    session.add(job)
    if job.run_dir and previous.get("step") != best["step"]:
        run = RunDir(job.run_dir)
        try:
            run.unpin_holder(BEST_PIN)
            run.pin(best["path"], BEST_PIN)
        except OSError as exc:
            log.warning("job %s: cannot pin its best checkpoint %s: %s", job.id, best["path"], exc)
    return best


# ---------------------------------------------------------------------------------------------- leaderboard


def leaderboard(
    session: Session, user: User, benchmark: str, metric: str, *, job_id: int | None = None
) -> list[dict[str, Any]]:
    """One entry per model (a checkpoint is a model): its latest succeeded evaluation on `benchmark`, ranked by
    `metric` (higher first). Only evaluations this user may see."""
    query = (
        select(EvalMetric, Evaluation, Job.finished_at, Job.owner_id)
        .join(Evaluation, col(Evaluation.job_id) == EvalMetric.job_id)
        .join(Job, col(Job.id) == Evaluation.job_id)
        .where(EvalMetric.benchmark == benchmark, EvalMetric.metric == metric, Job.status == JobStatus.succeeded.value)
    )
    if not user.is_admin:
        query = query.where(Job.owner_id == user.id)
    if job_id is not None:
        query = query.where(Evaluation.source_job_id == job_id)
    latest: dict[str, tuple] = {}
    for m, evaluation, finished_at, _owner in session.exec(query.order_by(col(Evaluation.job_id))).all():
        latest[evaluation.model_path] = (m, evaluation, finished_at)
    entries = []
    for m, evaluation, finished_at in latest.values():
        data = ((evaluation.summary or {}).get("benchmarks") or {}).get(benchmark) or {}
        entries.append(
            {
                "evaluation_id": evaluation.job_id,
                "model": evaluation.model_label,
                "model_path": evaluation.model_path,
                "source_job_id": evaluation.source_job_id,
                "checkpoint_step": evaluation.checkpoint_step,
                "value": m.value,
                "stderr": m.stderr,
                "ci95": [m.ci_low, m.ci_high],
                "n": m.n,
                "data_sha256": data.get("data_sha256"),
                "evaluated_at": finished_at,
            }
        )
    entries.sort(key=lambda e: (-e["value"], e["stderr"] if e["stderr"] is not None else 0.0, e["evaluation_id"]))
    for rank, entry in enumerate(entries, 1):
        entry["rank"] = rank
    return entries


def disable_schedules_of_job(session: Session, job_id: int, why: str) -> list[int]:
    """Disable the evaluation schedules that watch (or evaluate the latest checkpoint of) job `job_id`, with `why`
    in their `last_message` (the job was deleted: a schedule must not outlive it silently). Returns their ids."""
    from training_platform.core.timeutil import utcnow
    from training_platform.db.models import EvalSchedule

    now = utcnow()
    schedules = session.exec(select(EvalSchedule).where(EvalSchedule.job_id == job_id)).all()
    for schedule in schedules:
        was = "enabled" if schedule.enabled else "already disabled"
        schedule.enabled = False
        schedule.next_fire_at = None
        schedule.updated_at = now
        schedule.last_message = f"{now.isoformat(timespec='seconds')}: {why}; schedule disabled (was {was})"
        session.add(schedule)
    return [row_id(s) for s in schedules]

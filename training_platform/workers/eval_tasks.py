"""Evaluation jobs (queue `eval`) and the schedule tick (queue `maintenance`, sent by beat).

`run_next_eval_job` is a wake-up like the training and data ones: it claims the most urgent queued `eval` job from
the database and runs it here, in this process (`evaluation.runner.run_evaluation`).

    queued --claim--> preflight (config valid; the model / checkpoint is there; every benchmark's data loads and
           its rows are valid; the code sandbox works) --> running (progress 0..100 in current_step)
           --> succeeded (metrics + per-sample records stored with the job's success in one transaction; the
               source training job's best checkpoint updated) | failed (error.json with the traceback) | cancelled

Output: TP_DATA_DIR/evals/job-<id>/ (summary.json, samples/, report.md/.html, eval.log, error.json on failure).
A cancel is seen between generation batches (the run stops there); a checkpoint being evaluated is pinned so the
training run's rotation keeps it until the evaluation ended.

The executor is the one the job's config records (`executor`, chosen at submission): local, or ray (the items
sharded over Ray actors on TP_RAY_ADDRESS's cluster; preflight checks the cluster answers). On ray, each worker's
progress (per benchmark and stage, done / total) is written to the evaluation row's `summary` every few seconds
while it runs, and kept in the stored summary's `executor.progress`.
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
import time
import traceback
from pathlib import Path
from typing import Any, TextIO

from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import select

from training_platform.core.errors import InvalidInput
from training_platform.core.settings import Settings, get_settings
from training_platform.db.models import Checkpoint, Job, JobStatus, row_id
from training_platform.db.session import session_scope
from training_platform.services import evaluations as eval_service
from training_platform.services import jobs as job_service
from training_platform.taskqueue.app import app
from training_platform.workers import supervisor
from training_platform.workers.lease import JobLease, JobLost

log = logging.getLogger("training_platform.workers.eval")

EVAL_TASK = "training_platform.workers.eval_tasks.run_next_eval_job"
SCHEDULE_TASK = "training_platform.workers.eval_tasks.fire_schedules"
CANCEL_POLL_S = 1.0
PROGRESS_WRITE_S = 2.0  # how often the Ray workers' progress is written to the evaluation row
# Share of a benchmark's progress that generation takes (scoring the rest).
GENERATE_SHARE = 0.8


class EvalCancelled(Exception):
    pass


class EvalPreflightFailed(InvalidInput):
    """The job is refused before it evaluates: the problems, and the preflight checks run so far (the last failed)."""

    def __init__(self, checks: list[dict[str, Any]], errors: list[tuple[str, str]]):
        super().__init__(errors)
        self.checks = checks


class EvalJobSupervisor:
    """Runs one claimed eval job under its lease (workers/lease.py: ownership, heartbeat, failure handling, finish);
    a SIGTERM of the worker stops the evaluation between batches."""

    def run(self) -> str:
        return self.lease.hold(self._run)

    def __init__(self, job_id: int, worker: str, settings: Settings | None = None):
        self.job_id, self.worker = job_id, worker
        self.settings = settings or get_settings()
        self.lease = JobLease(job_id, worker, self.settings)
        self.out_dir = self.settings.data_path / "evals" / f"job-{job_id}"
        self._log_file: TextIO | None = None
        self._n_benchmarks = 1
        self._benchmark_index: dict[str, int] = {}
        self._last_cancel_check = 0.0
        self._main_thread = threading.main_thread()
        self._executor: dict[str, Any] = {"name": "local"}
        # the Ray workers' progress: {worker: {"benchmark": name, "stages": {stage: (done, total)}}}
        self._workers: dict[int, dict[str, Any]] = {}
        self._workers_lock = threading.Lock()
        self._workers_changed = False
        self._last_progress_write = 0.0

    # -- logging into eval.log (what GET /jobs/{id}/logs shows)

    def _log(self, message: str) -> None:
        line = f"{time.strftime('%Y-%m-%d %H:%M:%S')} {message}"
        log.info("job %s: %s", self.job_id, message)
        if self._log_file is not None:
            self._log_file.write(line + "\n")
            self._log_file.flush()

    def _run(self) -> str:
        job = self.lease.read()
        if job.cancel_requested:
            self.lease.finish(JobStatus.cancelled.value, "cancelled by user before it started")
            self._release(job)
            return JobStatus.cancelled.value
        from training_platform.workers.tasks import _wait_for_warm_up

        _wait_for_warm_up()  # transformers' lazy imports are not thread-safe
        try:
            config, checks = self._preflight(job)
        except EvalPreflightFailed as exc:
            report = {"ok": False, "checks": exc.checks, "errors": exc.detail()}
            self.lease.finish(
                JobStatus.failed.value, "preflight failed", error=f"preflight failed: {exc}", preflight=report
            )
            self._release(job)
            return JobStatus.failed.value

        if self.out_dir.exists():  # a previous attempt's partial output
            shutil.rmtree(self.out_dir)
        self.out_dir.mkdir(parents=True)
        self._log_file = (self.out_dir / "eval.log").open("a", encoding="utf-8")
        try:
            with session_scope() as session:
                locked = self.lease.locked(session)
                locked.preflight = {"ok": True, "checks": checks}
                locked.run_dir = str(self.out_dir)
                locked.current_step = 0
                eval_service.record_worker_progress(session, self.job_id, None)  # a previous attempt's
                job_service.transition(
                    session, locked, JobStatus.running, f"evaluation started (attempt {locked.attempts})"
                )
            self.lease.heartbeater.step = 0
            return self._evaluate(job, config)
        finally:
            self._release(job)
            self._log_file.close()
            self._log_file = None

    def _release(self, job: Job) -> None:
        eval_service.release_pin(job)

    # -- preflight

    def _preflight(self, job: Job):
        from training_platform.evaluation.benchmarks import EvalDataError
        from training_platform.evaluation.config import EvalConfig
        from training_platform.evaluation.runner import prepare_benchmarks

        checks: list[dict[str, Any]] = []
        cfg = job.config or {}
        try:
            config = EvalConfig.model_validate(cfg.get("eval"))
        except Exception as exc:  # noqa: BLE001 - a stored config that no longer validates
            raise EvalPreflightFailed(
                [{"name": "config", "ok": False}], [("config", f"not a valid evaluation config: {exc}")]
            ) from None
        checks.append({"name": "config", "ok": True})

        problems = self._path_problems(job, config)
        if problems:
            raise EvalPreflightFailed([*checks, {"name": "paths", "ok": False}], problems)
        checks.append({"name": "paths", "ok": True})

        target = cfg.get("target") or {}
        problem = self._model_problem(config, target)
        if problem:
            raise EvalPreflightFailed(
                [*checks, {"name": "model", "ok": False, "detail": problem}], [("model", problem)]
            )
        checks.append({"name": "model", "ok": True, "detail": config.model.path})
        self._executor = dict(cfg.get("executor") or {"name": "local"})
        if self._executor.get("name") == "ray":  # the cluster may have gone since the submission
            problem = eval_service.ray_problem(self.settings.ray_address, config.model.backend == "openai")
            if problem:
                raise EvalPreflightFailed(
                    [*checks, {"name": "executor", "ok": False, "detail": problem}], [("executor", problem)]
                )
            workers = self._executor.get("workers")
            checks.append({"name": "executor", "ok": True, "detail": f"ray ({workers or 'default'} workers)"})
        if target.get("run_dir") and target.get("checkpoint_step") is not None:  # again, for a retry or requeue
            from training_platform.training.rundir import RunDir

            RunDir(target["run_dir"]).pin(target["model_path"], eval_service.eval_pin(row_id(job)))
        try:
            prepared = prepare_benchmarks(config)
        except EvalDataError as exc:
            details = exc.messages
            msg = str(exc) + (": " + "; ".join(str(d) for d in details[:10]) if details else "")
            raise EvalPreflightFailed([*checks, {"name": "data", "ok": False}], [("benchmarks", msg)]) from None
        except Exception as exc:  # noqa: BLE001 - the sandbox refusing, an unknown benchmark: loud and specific
            raise EvalPreflightFailed(
                [*checks, {"name": "data", "ok": False}], [("benchmarks", f"{type(exc).__name__}: {exc}")]
            ) from None
        checks.append({"name": "data", "ok": True, "detail": {spec.name: len(items) for spec, _, items, _ in prepared}})
        self._n_benchmarks = len(config.benchmarks)
        self._benchmark_index = {spec.name: i for i, spec in enumerate(config.benchmarks)}
        return config, checks

    def _path_problems(self, job: Job, config) -> list[tuple[str, str]]:
        """The path policy again, for the job's owner, right before anything is opened: the model directory and
        every path field of the benchmarks (a symlink swapped in after submission is refused here)."""
        from training_platform.core.path_policy import check_model_paths, check_path, is_hub_id
        from training_platform.services.access import reader_for_owner

        with session_scope() as session:
            reader = reader_for_owner(session, job.owner_id)
            if reader is None:
                return [("owner", f"the job's owner (user {job.owner_id}) no longer exists")]
            errors = []
            model = config.model.path
            if config.model.backend != "openai" and not is_hub_id(model, self.settings):
                error = check_path("model", model, self.settings, reader)
                if error is not None:
                    errors.append(error)
            for i, spec in enumerate(config.benchmarks):
                errors += check_model_paths(spec, self.settings, reader, prefix=f"benchmarks.{i}.")
        return [(e[0], e[1]) for e in errors]

    def _model_problem(self, config, target: dict) -> str | None:
        if config.model.backend == "openai":  # the endpoint again: an admin may have removed it since
            from training_platform.core.endpoints import EndpointError
            from training_platform.db.endpoints_crud import worker_resolver

            try:
                worker_resolver(self.settings).resolve(config.model.endpoint, config.model.path)
            except EndpointError as exc:
                return str(exc)
            return None
        step, source = target.get("checkpoint_step"), target.get("source_job_id")
        if source is not None and step is not None:
            with session_scope() as session:
                ckpt = session.exec(
                    select(Checkpoint).where(Checkpoint.job_id == source, Checkpoint.step == step)
                ).first()
                if ckpt is None or ckpt.removed:
                    return (
                        f"checkpoint step {step} of job {source} was removed (rotated away by "
                        f"keep_last_checkpoints) before it could be evaluated"
                    )
        path = Path(config.model.path)
        if path.is_absolute() or path.exists():
            if not path.is_dir():
                return f"no model directory at {path}"
            if not (path / "config.json").is_file() and not (path / "adapter_config.json").is_file():
                return f"{path} holds no config.json or adapter_config.json: not a model directory"
        return None

    # -- running

    def _on_progress(self, event: dict[str, Any]) -> None:
        benchmark = event.get("benchmark")
        if event.get("worker") is not None:  # one Ray worker's own counts (the sums come as events without it)
            self._on_worker_progress(event)
        else:
            index = self._benchmark_index.get(benchmark, 0) if benchmark is not None else 0
            total = max(1, int(event.get("total") or 1))
            fraction = min(1.0, int(event.get("done") or 0) / total)
            stage = event.get("stage")
            if stage == "generate":
                within = GENERATE_SHARE * fraction
            elif stage == "score":
                within = GENERATE_SHARE + (1 - GENERATE_SHARE) * fraction
            else:
                within = fraction
            percent = int(99 * (index + within) / self._n_benchmarks)
            self.lease.heartbeater.step = max(self.lease.heartbeater.step or 0, percent)
        # Scoring threads call this too; only the main thread may stop the run (an exception there ends it).
        if threading.current_thread() is self._main_thread:
            now = time.monotonic()
            if self._workers_changed and now - self._last_progress_write >= PROGRESS_WRITE_S:
                self._last_progress_write = now
                self._write_worker_progress()
            if now - self._last_cancel_check >= CANCEL_POLL_S:
                self._last_cancel_check = now
                if self.lease.cancel_requested() or self.lease.heartbeater.lost.is_set() or self.lease.shutting_down:
                    raise EvalCancelled()

    def _on_worker_progress(self, event: dict[str, Any]) -> None:
        worker, benchmark = int(event["worker"]), str(event.get("benchmark"))
        with self._workers_lock:
            state = self._workers.get(worker)
            if state is None or state["benchmark"] != benchmark:  # its next benchmark: the last one's counts go
                state = self._workers[worker] = {"benchmark": benchmark, "stages": {}}
            state["stages"][str(event.get("stage"))] = (int(event.get("done") or 0), int(event.get("total") or 0))
            self._workers_changed = True

    def _worker_progress(self) -> list[dict[str, Any]]:
        """Per worker and stage of the benchmark it works on (or last worked on): done / total."""
        with self._workers_lock:
            self._workers_changed = False
            return [
                {"worker": worker, "benchmark": state["benchmark"], "stage": stage, "done": done, "total": total}
                for worker, state in sorted(self._workers.items())
                for stage, (done, total) in state["stages"].items()
            ]

    def _write_worker_progress(self) -> None:
        executor = {**self._executor, "progress": self._worker_progress()}
        try:
            with session_scope() as session:
                eval_service.record_worker_progress(session, self.job_id, executor)
        except SQLAlchemyError as exc:  # shown progress only: the next write tries again
            log.warning("job %s: cannot record the workers' progress: %s", self.job_id, exc)

    def _run_and_store(self, job: Job, config) -> str:
        from training_platform.db.endpoints_crud import worker_resolver
        from training_platform.evaluation.runner import run_evaluation

        ray = self._executor.get("name") == "ray"
        try:
            summary = run_evaluation(
                config,
                self.out_dir,
                progress=False,
                log=self._log,
                on_progress=self._on_progress,
                endpoints=worker_resolver(self.settings),
                executor="ray" if ray else "local",
                workers=self._executor.get("workers") if ray else None,
                ray_address=self.settings.ray_address if ray else None,
            )
        except BaseException:
            self._release(job)  # before the job ends: whoever sees it finished sees the checkpoint released
            raise
        self._release(job)
        return self._store(job, summary)

    def _evaluate(self, job: Job, config) -> str:
        try:
            return self._run_and_store(job, config)
        except JobLost:
            raise
        except EvalCancelled:
            if self.lease.heartbeater.lost.is_set():
                raise JobLost() from None
            if self.lease.cancel_requested():
                self._log("cancelled by user")
                self.lease.finish(JobStatus.cancelled.value, "cancelled by user (evaluation stopped)")
                return JobStatus.cancelled.value
            self.lease.finish(JobStatus.queued.value, "worker shutting down: requeued")
            return JobStatus.queued.value
        except Exception as exc:  # noqa: BLE001 - recorded with its traceback, then the job fails loudly
            from training_platform.training.rundir import redact

            tb = redact(traceback.format_exc())
            message = redact(f"{type(exc).__name__}: {exc}")
            (self.out_dir / "error.json").write_text(
                json.dumps({"type": type(exc).__name__, "message": message, "traceback": tb}, indent=2)
            )
            self._log(f"FAILED: {message}\n{tb}")
            first = message.splitlines()[0] if message else type(exc).__name__
            self.lease.finish(JobStatus.failed.value, "evaluation failed", error=f"evaluation failed: {first[:2000]}")
            return JobStatus.failed.value

    def _store(self, job: Job, summary: dict[str, Any]) -> str:
        """Results, the best checkpoint and the job's success in one transaction (if the job is still ours)."""
        self.lease.heartbeater.stop()
        keep_best_by = (job.config or {}).get("keep_best_by")
        source = ((job.config or {}).get("target") or {}).get("source_job_id")
        if self._workers:  # the workers' final counts, with the executor the run reports
            summary = {**summary, "executor": {**(summary.get("executor") or {}), "progress": self._worker_progress()}}
        with session_scope() as session:
            locked = self.lease.locked(session)
            n = eval_service.store_results(session, self.job_id, self.out_dir, summary)
            parts = []
            for name, result in summary["benchmarks"].items():
                primary = result.get("primary_metric")
                metric = (result.get("metrics") or {}).get(primary)
                if metric:
                    parts.append(f"{name}/{primary} {metric['value']:.4f} (n={metric['n']})")
            locked.current_step = 100
            job_service.transition(
                session, locked, JobStatus.succeeded.value, f"evaluated: {', '.join(parts)}; {n} samples stored"
            )
            best = None
            if keep_best_by and source is not None:
                session.flush()
                best = eval_service.update_best_checkpoint(session, source, keep_best_by)
        self._log(f"done: {', '.join(parts)}")
        if best:
            self._log(f"best checkpoint of job {source} by {keep_best_by}: step {best['step']} ({best['value']:.4f})")
        return JobStatus.succeeded.value


@app.task(name=EVAL_TASK, bind=True, acks_late=True, reject_on_worker_lost=True)
def run_next_eval_job(self) -> int | None:
    return supervisor.run_next_job(
        "eval",
        worker=supervisor.worker_identity(self.request.hostname),
        task_id=self.request.id,
        supervisor_class=EvalJobSupervisor,
    )


@app.task(name=SCHEDULE_TASK, ignore_result=True)
def fire_schedules() -> dict:
    from training_platform.services import schedules as scheduler

    return scheduler.tick()

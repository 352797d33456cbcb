# Over 600 lines: a training job's whole life in a worker (claim, preflight, child, ingest, end, recovery).
"""What a worker does with a training job: claim it from the database, gate it (preflight), run the training core
as a child process, mirror its run directory into the database, and record how it ended. Plus the recovery sweep.
The Celery tasks (`tasks.py`) only call into here.

Job lifecycle on a worker:

    queued --claim--> preflight --gate ok--> running --child exits--> succeeded | failed | cancelled
                         |                      |                   \\-> queued (stopped without a cancel request,
                         \\--gate failed--> failed                        e.g. the worker is shutting down)
    preflight/running with a stale heartbeat --recover_stale_jobs--> queued  (the worker died)

Process model and failure handling:
- The training core runs as `python -m training_platform.cli train CONFIG --output RUN` (or `--resume RUN` when
  the run directory has a checkpoint), so a crash or OOM kills the child, never the worker.
- The child is started with `prctl(PR_SET_PDEATHSIG, SIGTERM)`: if the process that supervises it dies (e.g. the
  Celery worker's main process is `kill -9`ed; Celery's prefork pool processes get SIGKILL when their parent dies),
  the training core receives SIGTERM, finishes its step, writes a checkpoint and stops. Its heartbeat then goes
  stale, the recovery sweep requeues the job, and the next worker resumes from that checkpoint.
- The run directory is guarded by an flock on `runs/job-<id>.lock`, held by the worker and inherited by the
  child: a new attempt waits until the previous attempt's training process has exited (SIGTERM after
  RUN_LOCK_TERM_AFTER_S, SIGKILL after RUN_LOCK_KILL_AFTER_S), so two processes never write one run directory.
- Every write that depends on owning the job (heartbeat, status changes) first locks the job row and checks that
  it is still `preflight`/`running` on this worker, so a job the recovery sweep gave to another worker is left
  alone (this worker then stops its child).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol

import yaml
from sqlalchemy import func, update
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import col, select

from training_platform.core.procutil import ProcessTreeMeter, die_with_parent
from training_platform.core.settings import Settings, get_settings
from training_platform.core.timeutil import utcnow
from training_platform.db import crud
from training_platform.db.models import Job, JobEvent, JobStatus, row_id
from training_platform.db.session import session_scope
from training_platform.services import jobs as job_service
from training_platform.workers import gate
from training_platform.workers.ingest import RunIngest
from training_platform.workers.lease import ACTIVE, MAX_ATTEMPTS, JobLease, JobLost, owned

log = logging.getLogger("training_platform.workers")

CLAIM_RETRIES = 5
# After a cancel (STOP file) the core stops at the end of the current step; these bound a step that never ends.
CANCEL_TERM_AFTER_S = 60.0
CANCEL_KILL_AFTER_S = 120.0
# A previous attempt's training process still holding the run directory (its worker died moments ago).
RUN_LOCK_TERM_AFTER_S = 60.0
RUN_LOCK_KILL_AFTER_S = 120.0
RUN_LOCK_GIVE_UP_S = 150.0
# How often a running job's measured CPU seconds and peak memory are written to its usage record.
USAGE_SAMPLE_EVERY_S = 5.0
# Queued jobs older than this with no wake-up message waiting get one re-sent by the recovery sweep.
LOST_MESSAGE_AFTER_S = 60.0


def worker_identity(hostname: str | None = None) -> str:
    return f"{hostname or socket.gethostname()}:{os.getpid()}"


# ---------------------------------------------------------------------------------------------- claiming


def claim_next_job(kind: str, worker: str, task_id: str | None = None) -> int | None:
    """Atomically move the most urgent queued job of `kind` to `preflight` for `worker`. Returns its id or None.

    One UPDATE ... WHERE id = (SELECT ... LIMIT 1) AND status = 'queued' RETURNING id: SQLite serialises writers,
    and on PostgreSQL the subquery takes the row with FOR UPDATE SKIP LOCKED (a concurrent claimer skips it
    instead of waiting); the outer `status = 'queued'` re-check makes a lost race return no row, then we retry.
    """
    if kind == "train":
        return claim_training_job(worker, task_id)
    for _ in range(CLAIM_RETRIES):
        with session_scope() as session:
            pick = (
                select(Job.id)
                .where(Job.status == JobStatus.queued.value, Job.kind == kind)
                .order_by(col(Job.priority).desc(), col(Job.id).asc())
                .limit(1)
            )
            if session.get_bind().dialect.name == "postgresql":
                pick = pick.with_for_update(skip_locked=True)
            now = utcnow()
            stmt = (
                update(Job)
                .where(col(Job.id) == pick.scalar_subquery(), col(Job.status) == JobStatus.queued.value)
                .values(**crud.claim_values(worker, task_id, now))
                .returning(col(Job.id), col(Job.attempts))
                .execution_options(synchronize_session=False)
            )
            row = session.exec(stmt).first()
            if row is not None:
                job_id, attempts = row
                session.add(
                    JobEvent(
                        job_id=job_id,
                        from_status=JobStatus.queued.value,
                        to_status=JobStatus.preflight.value,
                        reason=f"claimed by {worker} (attempt {attempts})",
                    )
                )
                return job_id
            remaining = session.exec(
                select(func.count()).select_from(Job).where(Job.status == JobStatus.queued.value, Job.kind == kind)
            ).one()
        if not remaining:
            return None
        time.sleep(0.05)
    return None


def _ray_devices(settings: Settings) -> dict[str, int] | None:
    """The Ray cluster's CPUs and GPUs when a queued job wants it (None: no cluster, or nobody asks)."""
    address = settings.ray_address
    if not address:
        return None
    from training_platform.core.node_devices import MAX_DEVICES_PER_TYPE

    with session_scope() as session:
        rows = session.exec(select(Job.config).where(Job.status == JobStatus.queued.value, Job.kind == "train")).all()
    from training_platform.services.scheduler import ask_of

    if not any(ask_of(0, 0, "", 0, utcnow(), cfg or {}).ray for cfg in rows):
        return None
    if address.startswith("ray://"):  # Ray Client: not readable from here; the launcher checks once joined
        return {"cpu": MAX_DEVICES_PER_TYPE, "cuda": MAX_DEVICES_PER_TYPE}
    from training_platform.training import ray_cluster

    snap = ray_cluster.cached_snapshot(address, settings.data_path / "ray")
    if "error" in snap:
        log.warning("the Ray cluster cannot be read (%s): its jobs wait", snap["error"])
        return {}
    totals = snap.get("totals", {})
    return {"cpu": int(totals.get("CPU", {}).get("total", 0)), "cuda": int(totals.get("GPU", {}).get("total", 0))}


def claim_training_job(worker: str, task_id: str | None = None) -> int | None:
    """The scheduler's pick (services/scheduler.py): the first queued training job, in fair-share order, whose
    devices are free on this node (or the Ray cluster) and whose owner's quota allows it; moved to preflight."""
    from training_platform.core.node_devices import node_devices, node_pool_name
    from training_platform.services import scheduler

    settings = get_settings()
    devices = node_devices(settings.node_devices)
    ray_devices = _ray_devices(settings)
    for _ in range(CLAIM_RETRIES):
        try:
            with session_scope() as session:
                return scheduler.claim(
                    session,
                    settings,
                    worker=worker,
                    node_pool=node_pool_name(),
                    node_devices=devices,
                    ray_devices=ray_devices,
                    task_id=task_id,
                )
        except SQLAlchemyError as exc:  # a concurrent claimer on PostgreSQL's serialisation, a locked SQLite
            log.warning("claim failed (retrying): %s", exc)
            time.sleep(0.2)
    return None


def wake_waiting_jobs(max_wakeups: int = 8) -> int:
    """Devices were freed: wake a worker for each queued training job (up to `max_wakeups`); the scheduler
    decides which, if any, may start now."""
    from training_platform.services.scheduler import queued_training_jobs

    try:
        with session_scope() as session:
            n = min(queued_training_jobs(session), max_wakeups)
    except SQLAlchemyError as exc:
        log.warning("cannot count queued jobs: %s", exc)
        return 0
    if n:
        from training_platform.taskqueue.wake import wake_quietly  # imports the Celery app

        for _ in range(n):
            wake_quietly("train", 0)
    return n


# ---------------------------------------------------------------------------------------------- child process


def _is_training_process(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"training_platform.cli" in cmdline


def _first_line(text: str) -> str:
    text = text.strip()
    return text.splitlines()[0] if text else ""


def classify_exit(
    returncode: int,
    *,
    run_info: dict,
    error_info: dict | None,
    console_tail: list[str],
    cancel_requested: bool,
    killed_by_us: bool,
    shutting_down: bool,
) -> tuple[str, str, str | None]:
    """How a training process ended -> (job status, event reason, job.error).

    exit 0 + succeeded -> succeeded; exit 0 + stopped -> cancelled if a cancel was requested, else queued again
    (resume later); exit 1 -> failed with error.json's message; exit 2 -> failed (invalid config); a signal ->
    failed (cancelled if we sent it for a cancel)."""
    step = run_info.get("step")
    at = f" at step {step}" if step is not None else ""
    if returncode == 0:
        status = run_info.get("status")
        if status == "succeeded":
            return JobStatus.succeeded.value, f"finished{at}", None
        if status == "stopped":
            why = run_info.get("stop_reason") or "stop requested"
            if cancel_requested:
                return JobStatus.cancelled.value, f"cancelled by user (stopped{at} with a checkpoint)", None
            who = "worker shutting down" if shutting_down else why
            return (
                JobStatus.queued.value,
                f"stopped{at} ({who}) without a cancel request: requeued to resume from its checkpoint",
                None,
            )
        error = f"training process exited 0 but run.json says status={status!r}"
        return JobStatus.failed.value, error, error
    if returncode == 1:
        if error_info:
            message = _first_line(str(error_info.get("message", ""))) or "(no message)"
            error = f"{error_info.get('type', 'Error')}: {message}"
        else:
            error = _first_line(run_info.get("error", "")) or (console_tail[-1] if console_tail else "unknown error")
        return JobStatus.failed.value, f"training failed{at}", error
    if returncode == 2:
        lines = [
            ln.strip()
            for ln in console_tail
            if ln.strip() and "nothing was started" not in ln and not ln.startswith(("Traceback", "  "))
        ]
        detail = "; ".join(lines[-10:])[:2000] or "see the console log"
        return JobStatus.failed.value, "invalid config", f"invalid config: {detail}"
    if returncode < 0:
        name = (
            signal.Signals(-returncode).name
            if -returncode in signal.Signals._value2member_map_
            else f"signal {-returncode}"
        )
        if cancel_requested and killed_by_us:
            return JobStatus.cancelled.value, f"cancelled by user (training process did not stop, {name} sent)", None
        hint = " (out of memory?)" if name == "SIGKILL" and not killed_by_us else ""
        error = f"training process killed by {name}{hint}{at}"
        return JobStatus.failed.value, error, error
    error = f"training process exited with code {returncode}" + (f": {console_tail[-1]}" if console_tail else "")
    return JobStatus.failed.value, error, error


# ---------------------------------------------------------------------------------------------- the supervisor


class Supervisor(Protocol):
    """What `run_next_job` runs a claimed job with: JobSupervisor, or a data / eval job's supervisor."""

    def run(self) -> str: ...


class JobSupervisor:
    """Runs one claimed job to its end on this worker. Use `run_next_job()` to claim and run."""

    def __init__(self, job_id: int, worker: str, settings: Settings | None = None):
        self.job_id = job_id
        self.worker = worker
        self.settings = settings or get_settings()
        self.runs = self.settings.data_path / "runs"
        self.run_dir = self.runs / f"job-{job_id}"
        self.config_file = self.runs / f"job-{job_id}.config.yaml"
        self.console_file = self.runs / f"job-{job_id}.console.log"
        self.lock_file = self.runs / f"job-{job_id}.lock"
        self.lease = JobLease(job_id, worker, self.settings)
        self.proc: subprocess.Popen | None = None
        self.meter = ProcessTreeMeter()
        self._lock_fd: int | None = None

    # -- main

    def run(self) -> str:
        """Returns the job's final status on this worker ('lost' when it was taken away)."""
        self.runs.mkdir(parents=True, exist_ok=True)
        try:
            return self.lease.hold(
                self._run, on_error=lambda: self._stop_child("worker error"), on_sigterm=self._on_sigterm
            )
        finally:
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

    def _on_sigterm(self) -> None:
        log.warning("job %s: worker process got SIGTERM: stopping the training with a checkpoint", self.job_id)
        self._touch_stop()

    @property
    def shutting_down(self) -> bool:
        return self.lease.shutting_down

    def _run(self) -> str:
        job = self.lease.read()
        if job.cancel_requested:
            self.lease.finish(JobStatus.cancelled.value, "cancelled by user before it started")
            return JobStatus.cancelled.value

        problems = self._path_problems(job)
        if problems:
            report = {
                "ok": False,
                "checks": [{"name": "paths", "ok": False, "detail": f"{len(problems)} path(s) refused"}],
                "errors": [{"loc": e.path, "msg": e.reason} for e in problems],
            }
            self.lease.finish(
                JobStatus.failed.value,
                "preflight failed",
                error=f"preflight failed: {gate.summarize(report)}",
                preflight=report,
            )
            return JobStatus.failed.value
        try:
            report = gate.run_preflight(
                job.config,
                data_dir=self.settings.data_path,
                min_free_disk_mb=self.settings.min_free_disk_mb,
                job_id=self.job_id,
            )
        except Exception as exc:  # noqa: BLE001 - a crashing check fails the job, loudly
            report = {
                "ok": False,
                "checks": [{"name": "preflight", "ok": False, "detail": "crashed"}],
                "errors": [{"loc": "<preflight>", "msg": f"{type(exc).__name__}: {_first_line(str(exc))}"}],
            }
        log.info(
            "job %s: preflight %s in %.1fs", self.job_id, "ok" if report["ok"] else "FAILED", report.get("seconds", 0)
        )
        if not report["ok"]:
            self.lease.finish(
                JobStatus.failed.value,
                "preflight failed",
                error=f"preflight failed: {gate.summarize(report)}",
                preflight=report,
            )
            return JobStatus.failed.value
        self.lease.update(preflight=report)

        self._acquire_run_lock()
        resume_step, fresh_reason = self._prepare_run_dir(job)
        if resume_step == -1:  # the previous attempt's process finished the run after its worker died
            return self._adopt_finished_run()
        self.config_file.write_text(yaml.safe_dump(job.config, sort_keys=False))

        with session_scope() as session:
            locked = crud.lock_job_row(session, self.job_id)
            if not owned(locked, self.worker):
                raise JobLost()
            cancelled, stop_first = locked.cancel_requested, locked.cancel_requested or self.shutting_down
            if not stop_first:
                if resume_step is not None:
                    dropped = crud.delete_metrics_after(session, self.job_id, resume_step)
                    locked.current_step = resume_step
                    reason = (
                        f"resuming from checkpoint step {resume_step} (attempt {locked.attempts}; "
                        f"{dropped} metric points after it dropped)"
                    )
                else:
                    crud.delete_metrics_after(session, self.job_id, -1)  # nothing survives a fresh start
                    locked.current_step = 0
                    reason = f"training started (attempt {locked.attempts}){fresh_reason}"
                locked.run_dir = str(self.run_dir)
                job_service.transition(session, locked, JobStatus.running, reason)
        if stop_first:  # asked to stop while we prepared: nothing was started
            if cancelled:
                self.lease.finish(JobStatus.cancelled.value, "cancelled by user before training started")
                return JobStatus.cancelled.value
            self.lease.finish(JobStatus.queued.value, "worker shutting down before training started: requeued")
            return JobStatus.queued.value
        return self._train(job, resume_step)

    def _path_problems(self, job: Job) -> list:
        """The path policy again, for the job's owner, before preflight opens anything: every path field of the
        config (a symlink swapped in after submission, a dataset unshared since, is refused here)."""
        from training_platform.core.errors import FieldError
        from training_platform.core.path_policy import check_marked
        from training_platform.services.access import reader_for_owner
        from training_platform.training.config import ConfigError, parse_config, training_config_paths

        try:
            cfg = parse_config(job.config)
        except ConfigError:
            return []  # the preflight reports the config's problems
        with session_scope() as session:
            reader = reader_for_owner(session, job.owner_id)
            if reader is None:
                return [FieldError("owner", f"the job's owner (user {job.owner_id}) no longer exists")]
            return check_marked(training_config_paths(cfg), self.settings, reader)

    # -- run directory

    def _acquire_run_lock(self) -> None:
        fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT, 0o644)
        started, signalled = time.monotonic(), None
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._lock_fd = fd
                return
            except BlockingIOError:
                pass
            if self.lease.heartbeater.lost.is_set():
                os.close(fd)
                raise JobLost()
            waited = time.monotonic() - started
            pid = _run_info(self.run_dir).get("pid")
            if signalled is None:
                log.info(
                    "job %s: waiting for the previous training process (pid %s) to leave %s",
                    self.job_id,
                    pid,
                    self.run_dir,
                )
                signalled = "none"
            for after, sig in ((RUN_LOCK_TERM_AFTER_S, signal.SIGTERM), (RUN_LOCK_KILL_AFTER_S, signal.SIGKILL)):
                if waited > after and signalled != sig.name and isinstance(pid, int) and _is_training_process(pid):
                    log.warning(
                        "job %s: previous training process %s still running after %.0fs: %s",
                        self.job_id,
                        pid,
                        waited,
                        sig.name,
                    )
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, sig)
                    signalled = sig.name
            if waited > RUN_LOCK_GIVE_UP_S:
                os.close(fd)
                raise RuntimeError(f"{self.run_dir} is still locked by another process after {waited:.0f}s")
            time.sleep(0.5)

    def _prepare_run_dir(self, job: Job) -> tuple[int | None, str]:
        """Returns (checkpoint step to resume from, or None for a fresh run, or -1: already succeeded; reason)."""
        from training_platform.training.engines import get_builder
        from training_platform.training.rundir import RunDir

        if not self.run_dir.exists() or not any(self.run_dir.iterdir()):
            return None, ""
        run = RunDir(self.run_dir)
        info = run.read_run_info()
        if info.get("status") == "succeeded" and run.final.is_dir():
            return -1, ""
        latest = run.latest_checkpoint()
        builder = get_builder(str(job.config.get("engine", "trl")), job.algorithm)
        if latest is not None and builder is not None and builder.capabilities.resume:
            return int(latest.name.rsplit("_", 1)[-1]), ""
        # Nothing to resume from (no checkpoint yet, or the algorithm cannot resume): keep the old attempt aside.
        n = 1
        while (aside := self.runs / f"job-{job.id}.attempt-{n}").exists():
            n += 1
        self.run_dir.rename(aside)
        with session_scope() as session:  # registered checkpoints of that attempt are no longer at their path
            crud.mark_checkpoints_removed(
                session,
                self.job_id,
                [str(self.run_dir / "checkpoints" / p.name) for p in RunDir(aside).checkpoint_dirs()],
            )
        why = "no checkpoint" if latest is None else f"{job.algorithm} cannot resume"
        return None, f"; previous attempt's run directory ({why}) moved to {aside.name}"

    def _adopt_finished_run(self) -> str:
        ingest = RunIngest(self.job_id, self.run_dir)
        ingest.sync(final=True)
        step = _run_info(self.run_dir).get("step") or ingest.max_step
        self.lease.finish(
            JobStatus.succeeded.value,
            f"finished at step {step} (by the previous attempt's process)",
            run_dir=str(self.run_dir),
            current_step=step,
        )
        return JobStatus.succeeded.value

    # -- training

    def _touch_stop(self) -> None:
        with contextlib.suppress(OSError):
            (self.run_dir / "STOP").touch()

    def _stop_child(self, why: str, grace_s: float = CANCEL_TERM_AFTER_S) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        log.warning("job %s: stopping the training process (%s)", self.job_id, why)
        self._touch_stop()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)
            return
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)
            return
        proc.kill()
        proc.wait()

    def _command(self, resume: bool) -> list[str]:
        cmd = [sys.executable, "-m", "training_platform.cli", "train", str(self.config_file)]
        return cmd + (["--resume", str(self.run_dir)] if resume else ["--output", str(self.run_dir)])

    def _train(self, job: Job, resume_step: int | None) -> str:
        cmd = self._command(resume_step is not None)
        env = {
            **os.environ,
            "TP_DATA_DIR": str(self.settings.data_path),
            "PYTHONUNBUFFERED": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
        if gate.gate_dir(self.settings.data_path, self.job_id).is_dir():  # data.gate: the preflight's decision
            env["TP_GATE_REPORTS_DIR"] = str(gate.gate_dir(self.settings.data_path, self.job_id))
        ingest = RunIngest(self.job_id, self.run_dir, hold_above_step=resume_step)
        with self.console_file.open("ab") as console:
            console.write(
                f"\n=== {utcnow().isoformat()} job {self.job_id} on {self.worker}: {' '.join(cmd)}\n".encode()
            )
            console.flush()
            console_start = console.tell()
            if resume_step is not None:  # the history up to the checkpoint (the last attempt may not have sent it)
                ingest.sync()
            assert self._lock_fd is not None  # _run took the run lock before training
            self.meter = ProcessTreeMeter()
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.runs,
                pass_fds=(self._lock_fd,),
                preexec_fn=die_with_parent(signal.SIGTERM),
            )
        log.info("job %s: training process %s started: %s", self.job_id, self.proc.pid, " ".join(cmd))
        self.meter.attach(self.proc.pid)
        returncode, cancel_requested, killed_by_us = self._supervise(ingest)
        self.meter.finish()
        self._record_usage()
        if self.lease.heartbeater.lost.is_set():
            raise JobLost()

        for attempt in range(5):  # the final ingest must not be lost to a database blip
            try:
                registered = ingest.registered
                ingest.sync(final=True)
                if ingest.registered != registered:
                    _checkpoint_triggers(self.job_id)
                break
            except SQLAlchemyError:
                if attempt == 4:
                    raise
                time.sleep(1)
        info = _run_info(self.run_dir)
        error_info = _read_json(self.run_dir / "error.json") if returncode == 1 else None
        status, reason, error = classify_exit(
            returncode,
            run_info=info,
            error_info=error_info,
            console_tail=_tail(self.console_file, console_start),
            cancel_requested=cancel_requested,
            killed_by_us=killed_by_us,
            shutting_down=self.shutting_down,
        )
        step = info.get("step")
        step = step if isinstance(step, int) else ingest.max_step
        self.lease.finish(status, reason, error=error, current_step=step)
        return status

    def _record_usage(self) -> None:
        """The process tree's measured CPU seconds and peak memory onto the attempt's usage record."""
        from training_platform.services.metering import record_sample

        try:
            with session_scope() as session:
                record_sample(
                    session,
                    self.job_id,
                    cpu_seconds=self.meter.cpu_seconds,
                    peak_memory_bytes=self.meter.peak_memory_bytes,
                )
        except SQLAlchemyError as exc:  # the next sample (or the end) writes it
            log.warning("job %s: usage sample not written: %s", self.job_id, exc)

    def _supervise(self, ingest: RunIngest) -> tuple[int, bool, bool]:
        """Wait for the child, ingesting and heartbeating. Returns (returncode, cancel requested, killed by us)."""
        assert self.proc is not None
        tick = self.settings.metrics_batch_interval_s
        cancel_requested = False
        stop_since: float | None = None
        signalled: set[str] = set()
        usage_written = time.monotonic()
        while True:
            try:
                returncode = self.proc.wait(timeout=tick)
                break
            except subprocess.TimeoutExpired:
                pass
            self.meter.sample()
            if time.monotonic() - usage_written >= USAGE_SAMPLE_EVERY_S:
                self._record_usage()
                usage_written = time.monotonic()
            try:
                registered = ingest.registered
                ingest.sync()
                if ingest.registered != registered:
                    _checkpoint_triggers(self.job_id)
                cancel_requested = self.lease.cancel_requested()
            except SQLAlchemyError as exc:  # what was read stays pending: written by the next tick
                log.warning("job %s: database write failed (will retry): %s", self.job_id, exc)
            self.lease.heartbeater.step = ingest.max_step or None
            lost = self.lease.heartbeater.lost.is_set()
            if cancel_requested or lost or self.shutting_down:
                if stop_since is None:
                    why = "cancel requested" if cancel_requested else "job lost" if lost else "worker shutting down"
                    log.info("job %s: %s: asking the training process to stop (STOP file)", self.job_id, why)
                    stop_since = time.monotonic()
                # Every tick: the core deletes a STOP file it finds at start-up (left from an earlier attempt).
                self._touch_stop()
            if stop_since is not None:
                waited = time.monotonic() - stop_since
                if waited > CANCEL_TERM_AFTER_S and "SIGTERM" not in signalled:
                    self.proc.terminate()
                    signalled.add("SIGTERM")
                if waited > CANCEL_KILL_AFTER_S and "SIGKILL" not in signalled:
                    self.proc.kill()
                    signalled.add("SIGKILL")
        with contextlib.suppress(SQLAlchemyError):
            cancel_requested = self.lease.cancel_requested()
        log.info("job %s: training process exited with %s", self.job_id, returncode)
        return returncode, cancel_requested, bool(signalled)


def _read_json(path: Path) -> dict:
    import json

    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _run_info(run_dir: Path) -> dict:
    return _read_json(run_dir / "run.json")


def _tail(path: Path, start: int, max_bytes: int = 65536) -> list[str]:
    try:
        with path.open("rb") as f:
            f.seek(max(start, f.seek(0, os.SEEK_END) - max_bytes))
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    # progress bars write \r-separated updates: keep the last state of each line
    return [line.rsplit("\r", 1)[-1] for line in text.splitlines() if line.strip()]


def _checkpoint_triggers(job_id: int) -> None:
    """New checkpoints were registered: fire the job's on_new_checkpoint evaluation schedules now (the beat tick
    would otherwise fire them within TP_SCHEDULE_TICK)."""
    from training_platform.services.schedules import fire_checkpoint_triggers

    try:
        fire_checkpoint_triggers(job_id)
    except Exception as exc:  # noqa: BLE001 - never let a schedule problem disturb the training job
        log.warning("job %s: checkpoint triggers failed (the schedule tick retries): %s", job_id, exc)


def run_next_job(
    kind: str = "train",
    *,
    worker: str | None = None,
    task_id: str | None = None,
    supervisor_class: Callable[[int, str], Supervisor] | None = None,
) -> int | None:
    """Claim the most urgent queued job of `kind` and run it to its end here with `supervisor_class` (training:
    JobSupervisor; data and eval jobs pass theirs). Returns its id (None: no job)."""
    worker = worker or worker_identity()
    job_id = claim_next_job(kind, worker, task_id)
    if job_id is None:
        log.info("%s: no queued %s job to claim", worker, kind)
        return None
    log.info("%s: claimed %s job %s", worker, kind, job_id)
    (supervisor_class or JobSupervisor)(job_id, worker).run()
    if kind == "train":  # its devices are free again: the jobs waiting for them get a worker
        wake_waiting_jobs()
    return job_id


# ---------------------------------------------------------------------------------------------- recovery


def recover_stale_jobs(*, send_wakeups: bool = True) -> dict[str, Any]:
    """Requeue jobs whose worker stopped heartbeating; re-send wake-ups for queued jobs whose message was lost.

    Returns {"requeued": [ids], "failed": [ids], "woken": {kind: n}}."""
    settings = get_settings()
    timeout = settings.heartbeat_timeout_s
    requeued, failed, to_wake = [], [], []
    with session_scope() as session:
        stale = [row_id(job) for job in crud.stale_jobs(session, timeout)]
    for job_id in stale:
        with session_scope() as session:
            job = crud.lock_job_row(session, job_id)
            cutoff = utcnow() - timedelta(seconds=timeout)
            # crud.stale_jobs' rule, re-checked under the lock: the last heartbeat (or, if there never was one,
            # the last update) is older than the timeout.
            last = (job.heartbeat_at or job.updated_at) if job is not None else None
            if job is None or job.status not in ACTIVE or last is None or _aware(last) >= cutoff:
                continue  # it heartbeated (or finished) since we looked
            since = _aware(last).isoformat(timespec="seconds")
            what = "heartbeat stale since" if job.heartbeat_at is not None else "no heartbeat at all since"
            reason = f"worker lost: {what} {since} (worker {job.worker}, step {job.current_step})"
            if job.attempts >= MAX_ATTEMPTS:
                job.error = f"gave up after {job.attempts} attempts; last: {reason}"
                job_service.transition(session, job, JobStatus.failed, job.error)
                failed.append(job_id)
            else:
                job_service.transition(session, job, JobStatus.queued, reason)
                requeued.append(job_id)
                to_wake.append((job.kind, job.priority))
        log.warning("job %s: %s", job_id, reason)
    woken: dict[str, int] = {}
    if send_wakeups:
        from training_platform.taskqueue.wake import wake_quietly  # imports the Celery app

        for kind, priority in to_wake:
            wake_quietly(kind, priority)
            woken[kind] = woken.get(kind, 0) + 1
        for kind, n in _lost_wakeups().items():
            for _ in range(n):
                wake_quietly(kind, 0)
            if n:
                log.warning("re-sent %d wake-up(s) for queued %s jobs with no message waiting", n, kind)
                woken[kind] = woken.get(kind, 0) + n
    return {"requeued": requeued, "failed": failed, "woken": woken}


def _lost_wakeups() -> dict[str, int]:
    """Per kind: queued jobs older than LOST_MESSAGE_AFTER_S minus the wake-ups waiting in the broker."""
    from training_platform.taskqueue.wake import TASK_FOR_KIND, waiting_messages

    cutoff = utcnow() - timedelta(seconds=LOST_MESSAGE_AFTER_S)
    with session_scope() as session:
        rows = session.exec(
            select(Job.kind, func.count())
            .where(Job.status == JobStatus.queued.value, Job.updated_at < cutoff)
            .group_by(Job.kind)
        ).all()
    missing = {}
    for kind, count in rows:
        if kind not in TASK_FOR_KIND:
            continue
        try:
            missing[kind] = max(0, count - waiting_messages(kind))
        except Exception as exc:  # noqa: BLE001
            log.warning("cannot read the %s queue length: %s", kind, exc)
    return missing


def _aware(ts):
    from datetime import UTC

    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)

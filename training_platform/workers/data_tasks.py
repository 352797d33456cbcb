"""(Over 600 lines: the ingest, operation and audit jobs share one supervisor and its lease.)

Data jobs (queue `data`): ingest of an uploaded or registered file, dataset operations (the registry of
`training_platform.data.operations`: clean, dedup, ...) on a stored version, and the audit (statistics) of a version.

`run_next_data_job` is a wake-up like `run_next_training_job`: it claims the most urgent queued `data` job from the
database (the supervisor's atomic claim, by kind) and runs it here, in this process: the operations are streaming
and CPU-light at our sizes, so no child process.

    queued --claim--> preflight (input version exists, file intact: sha256 re-checked, params valid)
           --> running (progress 0..100 in current_step) --> succeeded (a new version: parent = the input,
               operation + full recipe recorded, report attached) | failed (error; nothing stored) | cancelled

An ingest job (`operation: ingest`) validates a file the API staged under datasets/staging/ (the API never parses
uploaded data), under the caps of docs/limits.md, computes its statistics and stores it as a version of its dataset;
the outcome is recorded in the job's `config.result` ({"version_id", "created", ...} or the refusal's `detail`, each
bad row named by its line). A refused upload that had created its dataset leaves no dataset behind.

A failure leaves nothing half-done: the output is written in a per-job work directory and enters the content store
only when the operation finished; the version row and the job's success are one transaction. A cancel requested
while the operation runs takes effect when it returns (its output is discarded).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
from pathlib import Path

from training_platform.core.errors import InvalidInput
from training_platform.core.settings import Settings, get_settings
from training_platform.db.models import Dataset, DatasetVersionRecord, JobStatus, row_id
from training_platform.db.session import session_scope
from training_platform.services import dataset_operations
from training_platform.services import datasets as dataset_service
from training_platform.services import jobs as job_service
from training_platform.taskqueue.app import app
from training_platform.workers import supervisor
from training_platform.workers.lease import JobLease

log = logging.getLogger("training_platform.workers.data")

DATA_TASK = "training_platform.workers.data_tasks.run_next_data_job"
# current_step while the operation reads its input: PROGRESS_START..PROGRESS_END by the bytes read so far.
PROGRESS_START, PROGRESS_END, PROGRESS_STORING = 2, 90, 95


class DataJobFailed(InvalidInput):
    """The job's input is refused, before or while the job runs: one `field: reason` (the job's error and its
    preflight detail)."""

    def __init__(self, field: str, reason: str):
        super().__init__([(field, reason)])

    @property
    def field(self) -> str:
        return self.errors[0].path

    @property
    def reason(self) -> str:
        return self.errors[0].reason


def _first_lines(exc: BaseException, n: int = 20) -> str:
    text = str(exc).strip() or type(exc).__name__
    lines = text.splitlines()
    more = f" (+{len(lines) - n} more)" if len(lines) > n else ""
    return "; ".join(lines[:n]) + more


class RayOperationCancelled(Exception):
    """A cancel stopped the operation's Ray driver."""


class InputProgress(threading.Thread):
    """Progress of an in-process operation without hooks in the domain code: how far this process has read the
    input file (Linux /proc/self/fdinfo of whatever descriptor has it open). Several passes keep the maximum."""

    def __init__(self, path: Path, on_progress, interval_s: float = 0.5):
        super().__init__(name="data-progress", daemon=True)
        self.path, self.on_progress, self.interval_s = path, on_progress, interval_s
        self._stop_event = threading.Event()
        self.fraction = 0.0

    def read(self) -> float | None:
        try:
            target = os.path.realpath(self.path)
            size = os.path.getsize(target)
            best = None
            for fd in os.listdir("/proc/self/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/self/fd/{fd}") != target:
                        continue
                    with open(f"/proc/self/fdinfo/{fd}") as f:
                        for line in f:
                            if line.startswith("pos:"):
                                pos = int(line.split()[1])
                                best = pos if best is None else max(best, pos)
            return None if best is None or not size else min(1.0, best / size)
        except OSError:
            return None

    def run(self) -> None:
        while not self._stop_event.wait(self.interval_s):
            fraction = self.read()
            if fraction is not None and fraction > self.fraction:
                self.fraction = fraction
                self.on_progress(fraction)

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout=2)


class DataJobSupervisor:
    """Runs one claimed data job under its lease (workers/lease.py: ownership, heartbeat carrying `current_step`,
    failure handling, finish)."""

    def run(self) -> str:
        return self.lease.hold(self._run)

    def __init__(self, job_id: int, worker: str, settings: Settings | None = None):
        self.job_id, self.worker = job_id, worker
        self.settings = settings or get_settings()
        self.lease = JobLease(job_id, worker, self.settings)
        self.workdir = dataset_service.store_dir(self.settings) / "tmp" / f"job-{job_id}"

    def _run(self) -> str:
        job = self.lease.read()
        if job.cancel_requested:
            self.lease.finish(JobStatus.cancelled.value, "cancelled by user before it started")
            return JobStatus.cancelled.value
        if isinstance(job.config, dict) and job.config.get("operation") == dataset_service.INGEST:
            return self._run_ingest(row_id(job), job.config)
        if isinstance(job.config, dict) and job.config.get("operation") == dataset_service.AUDIT:
            return self._run_audit(row_id(job), job.config)
        if isinstance(job.config, dict) and job.config.get("operation") == "reward_shadow":
            from training_platform.workers.shadow_task import run_shadow

            return run_shadow(self, row_id(job), job.config, job.owner_id)
        if isinstance(job.config, dict) and job.config.get("operation") == "gate":
            return self._run_gate(row_id(job), job.config, job.owner_id)
        try:
            dataset_id, source, params, checks = self._preflight(job.config, job.owner_id)
        except DataJobFailed as exc:
            report = {
                "ok": False,
                "checks": [{"name": "input", "ok": False, "detail": exc.reason}],
                "errors": [{"loc": exc.field, "msg": exc.reason}],
            }
            self.lease.finish(
                JobStatus.failed.value,
                "preflight failed",
                error=f"preflight failed: {exc.field}: {exc.reason}",
                preflight=report,
            )
            return JobStatus.failed.value
        operation = job.config["operation"]
        executor = job.config.get("executor") or "local"
        self._start_running(f"{operation} started on {executor} (attempt {job.attempts})", checks)

        shutil.rmtree(self.workdir, ignore_errors=True)  # a previous attempt's leftovers
        self.workdir.mkdir(parents=True)
        try:
            return self._operate(row_id(job), operation, params, dataset_id, source, executor)
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # -- ingest (upload / register) and audit jobs

    def _staged_file(self, config: dict) -> Path:
        staging = dataset_service.staging_dir(self.settings).resolve()
        staged = config.get("staged")
        if not isinstance(staged, str) or not isinstance(config.get("dataset_id"), int):
            raise DataJobFailed("staged", "the job config names no staged file and dataset")
        path = dataset_service.absolute(staged, self.settings).resolve()
        if not path.is_relative_to(staging):
            raise DataJobFailed("staged", f"{staged} is not in the staging area")
        if not path.is_file():
            raise DataJobFailed("staged", f"the staged file {staged} is missing")
        return path

    def _fail_ingest(self, config: dict, reason: str, result: dict, *, preflight: dict | None = None) -> str:
        """Fail the ingest job with its refusal recorded in config.result; drop the dataset it created if it has
        nothing else; remove the staged file."""
        error = "; ".join(f"{d['loc']}: {d['msg']}" for d in result["detail"][:5])
        more = len(result["detail"]) - 5
        error = f"{reason}: {error}" + (f" (+{more} more)" if more > 0 else "")
        fields = {"config": {**config, "result": result}}
        if preflight is not None:
            fields["preflight"] = preflight

        def drop_the_new_dataset(session) -> None:  # with the failure: whoever sees "failed" sees it gone
            if dataset_service.drop_if_empty(session, config["dataset_id"], except_job=self.job_id):
                log.info(
                    "job %s: dataset %s had nothing but this refused upload: removed", self.job_id, config["dataset_id"]
                )

        if self.lease.finish(JobStatus.failed.value, reason, error=error, with_end=drop_the_new_dataset, **fields):
            with contextlib.suppress(OSError, DataJobFailed):
                self._staged_file(config).unlink(missing_ok=True)
        return JobStatus.failed.value

    def _run_ingest(self, job_id: int, config: dict) -> str:
        kind = config.get("kind", "upload")
        try:  # files of ingest jobs cancelled or deleted while queued
            with session_scope() as session:
                swept = dataset_service.sweep_staging(session, self.settings)
            if swept:
                log.info("job %s: removed %d abandoned staged file(s)", job_id, len(swept))
        except Exception:  # noqa: BLE001 - housekeeping must not fail the job
            log.exception("job %s: sweeping the staging area failed", job_id)
        try:
            staged = self._staged_file(config)
            with session_scope() as session:
                if session.get(Dataset, config["dataset_id"]) is None:
                    raise DataJobFailed("dataset_id", f"dataset {config['dataset_id']} no longer exists")
        except DataJobFailed as exc:
            detail = [{"loc": exc.field, "msg": exc.reason}]
            report = {"ok": False, "checks": [{"name": "input", "ok": False, "detail": exc.reason}], "errors": detail}
            return self._fail_ingest(
                config, "preflight failed", {"accepted": False, "stored": False, "detail": detail}, preflight=report
            )
        size = staged.stat().st_size
        self._start_running(
            f"{kind} ingest started (attempt {self.lease.read().attempts})",
            {"ok": True, "checks": [{"name": "input", "ok": True, "detail": f"staged file, {size} bytes"}]},
        )
        progress = InputProgress(staged, self._progress)
        progress.start()
        try:
            prepared = dataset_service.prepare_ingest(
                staged,
                suffix=config.get("suffix") or staged.suffix,
                settings=self.settings,
                fmt=config.get("format"),
                policy=config.get("policy", "reject"),
                source=config.get("source"),
            )
            self.lease.heartbeater.step = PROGRESS_END
            audit = dataset_service.compute_audit(prepared.content, prepared.described.format)
        except dataset_service.IngestRefused as exc:
            detail = [{"loc": loc, "msg": msg} for loc, msg in exc.errors]
            shown_rows = {loc.split(":", 1)[0] for loc, _ in exc.errors if loc.startswith("line ")}
            if exc.bad_rows > len(shown_rows):
                detail.append({"loc": "<file>", "msg": f"{exc.bad_rows} bad rows in all (the first are listed)"})
            log.info("job %s: %s refused: %s", job_id, kind, _first_lines(exc, 3))
            return self._fail_ingest(
                config,
                f"{kind} refused",
                {
                    "accepted": False,
                    "stored": False,
                    "detail": detail,
                    "rows": exc.rows,
                    "bad_rows": exc.bad_rows,
                    "policy": exc.policy,
                },
            )
        except Exception as exc:  # noqa: BLE001 - a data-layer failure: the upload is refused, not the worker
            log.warning("job %s: %s failed: %s", job_id, kind, _first_lines(exc, 3))
            return self._fail_ingest(
                config,
                f"{kind} failed",
                {
                    "accepted": False,
                    "stored": False,
                    "detail": [{"loc": "<file>", "msg": f"{type(exc).__name__}: {_first_lines(exc)}"}],
                },
            )
        finally:
            progress.stop()
        if self.lease.cancel_requested():
            prepared.discard()
            self.lease.finish(JobStatus.cancelled.value, f"cancelled by user ({kind} validated; nothing stored)")
            return JobStatus.cancelled.value
        self.lease.heartbeater.step = PROGRESS_STORING
        self.lease.heartbeater.stop()
        try:
            with session_scope() as session:
                job = self.lease.locked(session)
                dataset = session.get(Dataset, config["dataset_id"])
                if dataset is None:
                    raise DataJobFailed("dataset deleted", "the dataset was deleted while the upload was checked")
                done = dataset_service.store_ingest(
                    session,
                    dataset,
                    prepared,
                    settings=self.settings,
                    operation=kind,
                    recipe=config.get("recipe"),
                    job_id=job_id,
                    audit=audit,
                )
                version = done.version
                report = done.report
                job.config = {
                    **config,
                    "result": {
                        "accepted": True,
                        "dataset_id": dataset.id,
                        "version_id": version.id,
                        "created": done.created,
                        "sha256": version.sha256,
                        "rows": version.rows,
                        "uploaded_rows": report.get("rows"),
                        "bad_rows": report.get("bad_row_count", 0),
                        "quarantine": report.get("quarantine"),
                    },
                }
                if done.created:
                    reason = f"{kind} -> version {version.id} (sha256 {version.sha256[:12]}, {version.rows} rows)"
                else:
                    reason = (
                        f"{kind} -> identical to the existing version {version.id} (sha256 "
                        f"{version.sha256[:12]}); no new version"
                    )
                job.current_step = 100
                job_service.transition(session, job, JobStatus.succeeded, reason)
        except DataJobFailed as exc:
            prepared.discard()
            return self._fail_ingest(
                config,
                exc.field,
                {"accepted": False, "stored": False, "detail": [{"loc": "dataset_id", "msg": exc.reason}]},
            )
        log.info("job %s: %s", job_id, reason)
        return JobStatus.succeeded.value

    def _locked_version(self, session, version_id: int, doing: str):
        """This worker's job, locked, and the dataset version it worked on; (job, None) with the job failed when
        the version was deleted meanwhile. Raises JobLost when the job is no longer this worker's."""
        job = self.lease.locked(session)
        stored = session.get(DatasetVersionRecord, version_id)
        if stored is None:
            job.error = f"the version was deleted while it was {doing}"
            job_service.transition(session, job, JobStatus.failed, job.error)
        return job, stored

    def _run_audit(self, job_id: int, config: dict) -> str:
        try:
            version = self._input_version(config)
        except DataJobFailed as exc:
            self.lease.finish(
                JobStatus.failed.value, "preflight failed", error=f"preflight failed: {exc.field}: {exc.reason}"
            )
            return JobStatus.failed.value
        self._start_running("audit started", {"ok": True, "checks": [{"name": "input", "ok": True}]})
        path = dataset_service.absolute(version.path, self.settings)
        progress = InputProgress(path, self._progress)
        progress.start()
        try:
            audit = dataset_service.compute_audit(path, version.format)
        finally:
            progress.stop()
        self.lease.heartbeater.stop()
        with session_scope() as session:
            job, stored = self._locked_version(session, row_id(version), "audited")
            if stored is None:
                return JobStatus.failed.value
            stored.audit = dataset_service.compact(audit)
            session.add(stored)
            job.current_step = 100
            if "error" in audit:
                job.error = f"audit failed: {audit['error']}"
                job_service.transition(session, job, JobStatus.failed, job.error)
                return JobStatus.failed.value
            job_service.transition(session, job, JobStatus.succeeded, f"audit of version {version.id} stored")
        return JobStatus.succeeded.value

    def _run_gate(self, job_id: int, config: dict, owner_id: int) -> str:
        """A quality gate on a version (training_platform/data/gate/): the report is stored with the job's
        success in one transaction; failing checks are the report's verdict, not the job's failure."""
        from training_platform.core.files import sha256_file
        from training_platform.data.gate import GateError
        from training_platform.services import gates as gate_service
        from training_platform.services.access import reader_for_owner

        try:
            version = self._input_version(config)
            path = dataset_service.absolute(version.path, self.settings)
            if sha256_file(path) != version.sha256:
                raise DataJobFailed("version_id", f"the file of version {version.id} was modified")
            with session_scope() as session:
                reader = reader_for_owner(session, owner_id)
                if reader is None:
                    raise DataJobFailed("owner", f"the job's owner (user {owner_id}) no longer exists")
                problems = gate_service.check_inputs(
                    list(config.get("eval_sets") or []), config.get("reference"), self.settings, reader
                )
                if problems:
                    raise DataJobFailed(problems[0][0], "; ".join(f"{loc}: {msg}" for loc, msg in problems))
                try:
                    profile = gate_service.resolve_profile(session, self.settings, str(config.get("profile")))
                except GateError as exc:
                    raise DataJobFailed("profile", str(exc)) from None
        except DataJobFailed as exc:
            self.lease.finish(
                JobStatus.failed.value, "preflight failed", error=f"preflight failed: {exc.field}: {exc.reason}"
            )
            return JobStatus.failed.value
        self._start_running(
            f"gate {profile.name} started",
            {
                "ok": True,
                "checks": [
                    {"name": "input", "ok": True, "detail": f"version {version.id} sha256 verified"},
                    {"name": "profile", "ok": True, "detail": f"{profile.name} (hash {profile.hash[:12]})"},
                ],
            },
        )
        progress = InputProgress(path, self._progress)
        progress.start()
        try:
            report = gate_service.run_on_file(
                path,
                profile,
                self.settings,
                eval_sets=config.get("eval_sets"),
                reference=config.get("reference"),
                fmt=version.format,
            )
        except Exception as exc:  # noqa: BLE001 - bad eval set rows, limits: the job fails with why
            self.lease.finish(
                JobStatus.failed.value,
                "gate failed to run",
                error=f"gate failed to run: {type(exc).__name__}: {_first_lines(exc)}",
            )
            return JobStatus.failed.value
        finally:
            progress.stop()
        report["dataset"]["path"] = version.path
        self.lease.heartbeater.stop()
        with session_scope() as session:
            job, stored = self._locked_version(session, row_id(version), "gated")
            if stored is None:
                return JobStatus.failed.value
            record = gate_service.store_report(session, stored, report, job_id)
            job.config = {
                **config,
                "result": {
                    "report_id": record.id,
                    "passed": record.passed,
                    "failed": report["failed"],
                    "skipped": report["skipped"],
                },
            }
            job.current_step = 100
            verdict = "passed" if record.passed else f"FAILED: {', '.join(report['failed'])}"
            job_service.transition(
                session,
                job,
                JobStatus.succeeded,
                f"gate {profile.name} on version {version.id}: {verdict} (report {record.id})",
            )
        return JobStatus.succeeded.value

    def _input_version(self, config: dict) -> DatasetVersionRecord:
        if not isinstance(config.get("version_id"), int) or not isinstance(config.get("dataset_id"), int):
            raise DataJobFailed("version_id", "the job config names no dataset version")
        with session_scope() as session:
            version = session.get(DatasetVersionRecord, config["version_id"])
            if version is None or version.dataset_id != config["dataset_id"]:
                raise DataJobFailed(
                    "version_id", f"dataset {config['dataset_id']} version {config['version_id']} no longer exists"
                )
            session.expunge(version)
        if not dataset_service.absolute(version.path, self.settings).is_file():
            raise DataJobFailed("version_id", f"the file of version {version.id} is missing: {version.path}")
        return version

    # -- steps

    def _preflight(self, config: dict, owner_id: int) -> tuple[int, DatasetVersionRecord, dict, dict]:
        """The input version exists and its file is intact; the parameters are still valid, their paths still
        readable by the job's owner (the path policy again, right before the files are opened)."""
        from training_platform.core.files import sha256_file
        from training_platform.services.access import reader_for_owner

        if not isinstance(config, dict) or config.get("operation") not in dataset_operations.operation_names():
            raise DataJobFailed("operation", f"not a dataset operation job config: {config!r:.200}")
        if not isinstance(config.get("version_id"), int) or not isinstance(config.get("dataset_id"), int):
            raise DataJobFailed("version_id", "the job config names no dataset version")
        with session_scope() as session:
            version = session.get(DatasetVersionRecord, config["version_id"])
            if (
                version is None
                or version.dataset_id != config.get("dataset_id")
                or session.get(Dataset, version.dataset_id) is None
            ):
                raise DataJobFailed(
                    "version_id",
                    f"dataset {config.get('dataset_id')} version {config.get('version_id')} no longer exists",
                )
            session.expunge(version)
        path = dataset_service.absolute(version.path, self.settings)
        if not path.is_file():
            raise DataJobFailed("version_id", f"the file of version {version.id} is missing: {version.path}")
        actual = sha256_file(path)
        if actual != version.sha256:
            raise DataJobFailed(
                "version_id", f"the file of version {version.id} was modified: sha256 {actual} != {version.sha256}"
            )
        with session_scope() as session:
            reader = reader_for_owner(session, owner_id)
            if reader is None:
                raise DataJobFailed("owner", f"the job's owner (user {owner_id}) no longer exists")
            try:
                params = dataset_operations.validate_operation(
                    config["operation"],
                    config.get("params") or {},
                    self.settings,
                    reader=reader,
                    input_format=version.format,
                )
            except dataset_operations.OperationInvalid as exc:
                raise DataJobFailed("params", str(exc)) from None
        checks = {
            "ok": True,
            "checks": [
                {"name": "input", "ok": True, "detail": f"version {version.id} sha256 verified"},
                {"name": "params", "ok": True},
            ],
        }
        return version.dataset_id, version, params, checks

    def _start_running(self, reason: str, checks: dict) -> None:
        with session_scope() as session:
            job = self.lease.locked(session)
            job.preflight = checks
            job.current_step = 0
            job_service.transition(session, job, JobStatus.running, reason)
        self.lease.heartbeater.step = PROGRESS_START

    def _progress(self, fraction: float) -> None:
        self.lease.heartbeater.step = PROGRESS_START + int((PROGRESS_END - PROGRESS_START) * fraction)

    def _operate(
        self,
        job_id: int,
        operation: str,
        params: dict,
        dataset_id: int,
        source: DatasetVersionRecord,
        executor: str = "local",
    ) -> str:
        source_path = dataset_service.absolute(source.path, self.settings)
        if executor == "ray":
            try:
                output = self._on_ray(job_id, operation, params, source_path)
            except RayOperationCancelled:
                self.lease.finish(JobStatus.cancelled.value, f"cancelled by user ({operation} on ray stopped)")
                return JobStatus.cancelled.value
            except Exception as exc:  # noqa: BLE001 - the operation's own failure, as its driver reported it
                return self._operation_failed(job_id, operation, exc)
            return self._finish_operation(job_id, operation, params, dataset_id, source, output)
        if dataset_operations.needs_transformers(operation, params):
            from training_platform.workers.tasks import _wait_for_warm_up

            _wait_for_warm_up()
        progress = InputProgress(source_path, self._progress)
        progress.start()
        try:
            output = dataset_operations.run_operation(operation, params, source_path, self.workdir, self.settings)
        except Exception as exc:  # noqa: BLE001 - the operation's own failure (bad rows, recipe, tokenizer, ...)
            return self._operation_failed(job_id, operation, exc)
        finally:
            progress.stop()
        return self._finish_operation(job_id, operation, params, dataset_id, source, output)

    def _operation_failed(self, job_id: int, operation: str, exc: BaseException) -> str:
        log.warning("job %s: %s failed: %s", job_id, operation, _first_lines(exc, 3))
        self.lease.finish(
            JobStatus.failed.value,
            f"{operation} failed",
            error=f"{operation} failed: {type(exc).__name__}: {_first_lines(exc)}",
        )
        return JobStatus.failed.value

    def _on_ray(self, job_id: int, operation: str, params: dict, source_path: Path):
        """The operation's Ray Data driver in a child process: a cancel kills it, and Ray then stops the tasks it
        owns; Ray's driver state never enters this worker. Progress (blocks done, per Ray worker) comes back through
        a file and is kept in the job's config as `ray_progress`."""
        import json
        import pickle
        import subprocess
        import sys

        result_file, progress_file = self.workdir / "ray-result.pkl", self.workdir / "ray-progress.json"
        request = self.workdir / "ray-request.json"
        request.write_text(
            json.dumps(
                {
                    "operation": operation,
                    "params": params,
                    "source": str(source_path),
                    "workdir": str(self.workdir),
                    "result": str(result_file),
                    "progress": str(progress_file),
                }
            )
        )
        # A plain child process (the worker's pool processes are daemons: no multiprocessing children)
        child = subprocess.Popen(
            [sys.executable, "-m", "training_platform.workers.ray_data_driver", str(request)],
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        seen = None
        try:
            while child.poll() is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.wait(timeout=1.0)
                if self.lease.cancel_requested():
                    child.terminate()  # SIGTERM: ray.init's handler exits, the driver disconnects
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        child.wait(timeout=10)
                    raise RayOperationCancelled()
                seen = self._ray_progress(progress_file, seen)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait(timeout=5)
        self._ray_progress(progress_file, seen)
        if not result_file.is_file():
            raise RuntimeError(f"the {operation} driver on ray exited with code {child.returncode} and no result")
        with result_file.open("rb") as f:
            outcome = pickle.load(f)
        if "error" in outcome:
            raise type(outcome["error_type"], (RuntimeError,), {})(outcome["error"])
        return outcome["output"]

    def _ray_progress(self, path: Path, seen: str | None) -> str | None:
        import json

        try:
            text = path.read_text()
            event = json.loads(text)
        except (OSError, ValueError):
            return seen
        if text == seen:
            return seen
        if event.get("total"):
            self._progress(min(1.0, event["done"] / event["total"]))
        with session_scope() as session:
            job = self.lease.locked(session)
            job.config = {**job.config, "ray_progress": event}
            session.add(job)
        return text

    def _finish_operation(self, job_id, operation, params, dataset_id, source, output) -> str:
        if self.lease.cancel_requested():
            self.lease.finish(JobStatus.cancelled.value, f"cancelled by user ({operation} finished; output discarded)")
            return JobStatus.cancelled.value
        self.lease.heartbeater.step = PROGRESS_STORING
        from training_platform.data.versions import describe_dataset

        described = describe_dataset(output.file, fmt=output.format)
        audit = dataset_service.compute_audit(output.file, described.format)
        try:
            return self._store(job_id, operation, params, dataset_id, source, output, described, audit)
        except DataJobFailed as exc:  # the transaction was rolled back: nothing stored
            self.lease.finish(JobStatus.failed.value, exc.field, error=exc.reason)
            return JobStatus.failed.value

    def _store(
        self,
        job_id: int,
        operation: str,
        params: dict,
        dataset_id: int,
        source: DatasetVersionRecord,
        output: dataset_operations.OperationOutput,
        described=None,
        audit: dict | None = None,
    ) -> str:
        """The new version and the job's success in one transaction (if the job is still ours)."""
        self.lease.heartbeater.stop()
        full_report = output.report
        with session_scope() as session:
            job = self.lease.locked(session)
            dataset = session.get(Dataset, dataset_id)
            parent = session.get(DatasetVersionRecord, source.id)
            if dataset is None or parent is None:
                raise DataJobFailed("dataset deleted", "the dataset was deleted while the operation ran")
            report = dataset_service.compact(full_report)
            if report != full_report:
                report["full_report"] = dataset_service.write_full_report(
                    full_report, row_id(dataset), f"job-{job_id}-{operation}", self.settings
                )
            version, created = dataset_service.add_version(
                session,
                dataset,
                output.file,
                suffix=output.suffix,
                operation=operation,
                settings=self.settings,
                fmt=output.format,
                parent=parent,
                recipe=params,
                report=report,
                stats=output.stats,
                job_id=job_id,
                described=described,
                audit=audit,
            )
            if created:
                reason = f"{operation} -> version {version.id} (sha256 {version.sha256[:12]}, {version.rows} rows)"
            else:
                reason = (
                    f"{operation} -> identical to the existing version {version.id} (sha256 "
                    f"{version.sha256[:12]}); no new version"
                )
            job.current_step = 100
            job_service.transition(session, job, JobStatus.succeeded, reason)
        log.info("job %s: %s", job_id, reason)
        return JobStatus.succeeded.value


@app.task(name=DATA_TASK, bind=True, acks_late=True, reject_on_worker_lost=True)
def run_next_data_job(self) -> int | None:
    return supervisor.run_next_job(
        "data",
        worker=supervisor.worker_identity(self.request.hostname),
        task_id=self.request.id,
        supervisor_class=DataJobSupervisor,
    )

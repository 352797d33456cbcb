"""The data worker's reward shadow test (`POST /rewards/shadow`): resolve and re-check the input for the job's owner,
score with both scorers (training/rewards/shadow.py) and store the report as the job's `config.result` with its
success in one transaction. A `fail` verdict is the report's answer, not the job's failure."""

from __future__ import annotations

import logging
from pathlib import Path

from training_platform.core.errors import InvalidInput
from training_platform.db.models import JobStatus
from training_platform.db.session import session_scope
from training_platform.services import datasets as dataset_service
from training_platform.services import jobs as job_service

log = logging.getLogger("training_platform.workers.shadow")


def run_shadow(sup, job_id: int, config: dict, owner_id: int) -> str:
    """`sup`: the DataJobSupervisor that claimed the job."""
    from training_platform.core.path_policy import check_path, resolve_path
    from training_platform.services.access import reader_for_owner
    from training_platform.training.rewards.shadow import ShadowInputError, shadow_report

    try:
        if isinstance(config.get("path"), str):
            with session_scope() as session:
                reader = reader_for_owner(session, owner_id)
                if reader is None:
                    raise InvalidInput([("owner", f"the job's owner (user {owner_id}) no longer exists")])
                problem = check_path("path", config["path"], sup.settings, reader)
            if problem is not None:
                raise InvalidInput([problem])
            path: Path = resolve_path(config["path"], sup.settings)
            if not path.is_file():
                raise InvalidInput([("path", f"no such file: {config['path']}")])
        else:
            version = sup._input_version(config)
            path = dataset_service.absolute(version.path, sup.settings)
    except InvalidInput as exc:  # the data supervisor's DataJobFailed is one too
        sup.lease.finish(JobStatus.failed.value, "preflight failed", error=f"preflight failed: {exc}")
        return JobStatus.failed.value
    sup._start_running("reward shadow test started", {"ok": True, "checks": [{"name": "input", "ok": True}]})
    params = dict(config.get("params") or {})
    try:
        report = shadow_report(
            params.pop("old"), params.pop("new"), path, **params, on_progress=lambda f: sup._progress(f)
        )
    except ShadowInputError as exc:
        result = {"detail": [{"loc": loc, "msg": msg} for loc, msg in exc.errors]}
        sup.lease.finish(
            JobStatus.failed.value,
            "shadow test refused",
            error=f"shadow test refused: {exc}",
            config={**config, "result": result},
        )
        return JobStatus.failed.value
    except Exception as exc:  # noqa: BLE001 - a reward that raises: the job fails with why
        sup.lease.finish(
            JobStatus.failed.value,
            "shadow test failed",
            error=f"shadow test failed: {type(exc).__name__}: {str(exc)[:2000]}",
        )
        return JobStatus.failed.value
    report["data"] = config.get("path") or f"dataset {config.get('dataset_id')} version {config.get('version_id')}"
    sup.lease.heartbeater.stop()
    with session_scope() as session:
        job = sup.lease.locked(session)
        job.config = {**config, "result": report}
        job.current_step = 100
        job_service.transition(
            session,
            job,
            JobStatus.succeeded,
            f"reward shadow test: {report['verdict']} (spearman {report['spearman']}, kendall {report['kendall']})",
        )
    return JobStatus.succeeded.value

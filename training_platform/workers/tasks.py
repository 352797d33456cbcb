"""Celery tasks: thin wrappers around `workers.supervisor` (all the logic lives there).

- `run_next_training_job` (queue `train`): a wake-up. Claims the most urgent queued training job from the
  database and runs it to its end in a child process. `acks_late` + `reject_on_worker_lost`: the message stays
  unacked while the job runs.
- `recover_stale_jobs` (queue `maintenance`, sent by beat every `TP_RECOVERY_INTERVAL` s): requeues jobs whose
  worker stopped heartbeating and re-sends lost wake-ups.
"""

from __future__ import annotations

import logging
import sys
import threading

from celery.signals import worker_process_init, worker_ready

from training_platform.taskqueue.app import app
from training_platform.workers import supervisor

log = logging.getLogger("training_platform.workers")


class _WorkerHandler(logging.StreamHandler):
    """The worker's stderr handler; `_tp_worker` marks it, so a second setup does not add another."""

    _tp_worker = True


def _setup_logging() -> None:
    """The Celery app leaves the root logger alone (worker_hijack_root_logger=False); show ours on stderr."""
    logger = logging.getLogger("training_platform")
    if not any(getattr(h, "_tp_worker", False) for h in logger.handlers):
        handler = _WorkerHandler(sys.__stderr__)  # not Celery's redirected stderr proxy
        handler.setFormatter(logging.Formatter("[%(asctime)s: %(levelname)s/%(processName)s] %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


@worker_ready.connect
def _on_worker_ready(**_kwargs) -> None:
    _setup_logging()


@worker_process_init.connect
def _on_worker_process_init(**_kwargs) -> None:
    _setup_logging()
    # A pool process forked from the main process must not share its database connections.
    from training_platform.db.session import get_engine

    get_engine().dispose(close=False)
    # Import the preflight's heavy modules (transformers, torch) in the background now, so a job's preflight does
    # not pay for them (~3 s). Not inline: a pool process must report ready within a few seconds.
    global _warm_up_thread
    _warm_up_thread = threading.Thread(target=_warm_up, name="tp-warm-up", daemon=True)
    _warm_up_thread.start()


_warm_up_thread: threading.Thread | None = None


def _wait_for_warm_up() -> None:
    """transformers' lazy imports are not thread-safe: never import it from the task while the warm-up does."""
    if _warm_up_thread is not None:
        _warm_up_thread.join()


def _warm_up() -> None:
    try:
        import torch  # noqa: F401
        from transformers import AutoConfig, AutoTokenizer  # noqa: F401

        from training_platform.training import preflight  # noqa: F401
        from training_platform.training.algorithms import ALGORITHMS  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - the preflight reports real import problems
        log.warning("warm-up import failed: %s", exc)


@app.task(
    name="training_platform.workers.tasks.run_next_training_job", bind=True, acks_late=True, reject_on_worker_lost=True
)
def run_next_training_job(self) -> int | None:
    _wait_for_warm_up()
    worker = supervisor.worker_identity(self.request.hostname)
    return supervisor.run_next_job("train", worker=worker, task_id=self.request.id)


@app.task(name="training_platform.workers.tasks.recover_stale_jobs", ignore_result=True)
def recover_stale_jobs() -> dict:
    return supervisor.recover_stale_jobs()

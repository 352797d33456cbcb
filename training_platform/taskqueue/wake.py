"""How the API (and the recovery sweep) tell workers there is work: one wake-up message per queued job."""

from __future__ import annotations

import logging

from training_platform.taskqueue.app import app

log = logging.getLogger("training_platform.taskqueue.wake")

TASK_FOR_KIND = {
    "train": "training_platform.workers.tasks.run_next_training_job",
    "data": "training_platform.workers.data_tasks.run_next_data_job",
    "eval": "training_platform.workers.eval_tasks.run_next_eval_job",
}


def wake_worker(kind: str = "train", priority: int = 0) -> str:
    """Send one wake-up message to the queue of `kind`. Returns the Celery task id."""
    # Redis transport: 0 is the most urgent of 0..9; our priorities are "higher = sooner".
    celery_priority = max(0, min(9, 9 - priority))
    result = app.send_task(TASK_FOR_KIND[kind], queue=kind, priority=celery_priority)
    return result.id


def wake_quietly(kind: str, priority: int) -> None:
    """A wake-up that may be lost (logged): the recovery sweep re-sends lost wake-ups."""
    try:
        wake_worker(kind, priority)
    except Exception as exc:  # noqa: BLE001 - see above
        log.warning("could not send a wake-up for a %s job: %s", kind, exc)


def waiting_messages(kind: str = "train") -> int:
    """Messages waiting in the broker queue of `kind` (not yet taken by a worker; all priority sub-queues)."""
    with app.connection_for_read() as conn:
        _, count, _ = conn.default_channel.queue_declare(queue=kind)
        return int(count)

"""The Celery application. Queues: train, data, eval, maintenance (beat's recovery sweep and schedule tick),
inference (generation for the playground and the OpenAI-compatible route: a request, not a job wake-up).

The database is the job queue of record (status, priority, attempts); a Celery message only wakes a worker, which
then claims the most urgent queued job of its kind from the database. So priority is exact, a lost message loses
nothing (the recovery sweep re-sends), and cancelling a queued job is a row update.
"""

from __future__ import annotations

from celery import Celery
from kombu import Exchange, Queue

from training_platform.core.settings import get_settings

QUEUES = ("train", "data", "eval", "maintenance", "inference")
RECOVERY_TASK = "training_platform.workers.tasks.recover_stale_jobs"
DATA_TASK = "training_platform.workers.data_tasks.run_next_data_job"
EVAL_TASK = "training_platform.workers.eval_tasks.run_next_eval_job"
SCHEDULE_TASK = "training_platform.workers.eval_tasks.fire_schedules"
INFERENCE_TASK = "training_platform.workers.inference_tasks.generate"  # the playground, /openai/v1
WEBHOOK_TASK = "training_platform.workers.webhook_tasks.deliver_webhook"  # job-end webhooks


def make_celery(broker_url: str | None = None) -> Celery:
    settings = get_settings()
    url = broker_url or settings.redis_url or "redis://127.0.0.1:6379/0"
    app = Celery(
        "training_platform",
        broker=url,
        include=[
            "training_platform.workers.tasks",
            "training_platform.workers.data_tasks",
            "training_platform.workers.eval_tasks",
            "training_platform.workers.webhook_tasks",
            "training_platform.workers.inference_tasks",
        ],
    )
    app.conf.update(
        # Each queue on its own direct exchange + routing key. A bare Queue(name) is bound to the default exchange
        # with the default routing key ("train" for all four): on an AMQP broker every queue would get a copy of
        # every message, and the worker banner shows them all as "exchange=train key=train".
        task_queues=[Queue(name, Exchange(name, type="direct"), routing_key=name) for name in QUEUES],
        task_default_queue="train",
        task_acks_late=True,  # a message is acked after the task ran, so a dead worker's message is redelivered
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,  # one long job at a time per process; do not hoard messages
        task_serializer="json",
        accept_content=["json"],
        result_backend=None,
        task_ignore_result=True,
        broker_connection_retry_on_startup=True,
        broker_transport_options={"visibility_timeout": 3600, "queue_order_strategy": "priority"},
        worker_hijack_root_logger=False,
        timezone="UTC",
        # The recovery sweep has its own queue, consumed by `tp beat` (beat embedded in a one-process worker), so
        # it runs even while every training worker is busy with a long job.
        task_routes={
            RECOVERY_TASK: {"queue": "maintenance"},
            SCHEDULE_TASK: {"queue": "maintenance"},
            WEBHOOK_TASK: {"queue": "maintenance"},
            DATA_TASK: {"queue": "data"},
            EVAL_TASK: {"queue": "eval"},
            INFERENCE_TASK: {"queue": "inference"},
        },
        beat_schedule={
            "recover-stale-jobs": {
                "task": RECOVERY_TASK,
                "schedule": settings.recovery_interval_s,
                "options": {"queue": "maintenance", "expires": max(settings.recovery_interval_s, 5.0)},
            },
            # Evaluation schedules (cron, and checkpoint triggers a worker may have missed): see scheduler.py.
            "fire-eval-schedules": {
                "task": SCHEDULE_TASK,
                "schedule": settings.schedule_tick_s,
                "options": {"queue": "maintenance", "expires": max(settings.schedule_tick_s, 5.0)},
            },
        },
    )
    return app


app = make_celery()

"""Celery task: deliver one job-end notification to one webhook (queue `maintenance`; the logic lives in
`training_platform/services/webhooks.py`).

Each attempt is one POST with a 5 s timeout; a retryable failure (connection error, timeout, 5xx, 429) is sent back
to the broker with a countdown (1x, 4x, 16x TP_WEBHOOK_BACKOFF), so a slow receiver never holds the maintenance
worker (beat's recovery sweep runs there too) for more than one attempt at a time.
"""

from __future__ import annotations

import logging

from training_platform.core.settings import get_settings
from training_platform.services import webhooks
from training_platform.taskqueue.app import WEBHOOK_TASK, app

log = logging.getLogger("training_platform.workers.webhooks")


@app.task(name=WEBHOOK_TASK, bind=True, acks_late=True, ignore_result=True, max_retries=webhooks.MAX_RETRIES)
def deliver_webhook(self, webhook_id: int, job_id: int, event: str, event_id: int | None, body: str) -> None:
    retries = self.request.retries or 0
    final = retries >= webhooks.MAX_RETRIES
    outcome = webhooks.deliver(webhook_id, job_id, event, event_id, body, attempt=retries + 1, final=final)
    if outcome is not None and outcome.retry and not final:
        countdown = get_settings().webhook_backoff_s * webhooks.RETRY_FACTORS[retries]
        raise self.retry(countdown=countdown)

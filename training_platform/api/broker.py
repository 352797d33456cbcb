"""Read-only looks at the Redis broker for health checks and the dashboard (short timeouts, never raises)."""

from __future__ import annotations

import redis

from training_platform.core.settings import get_settings

JOB_KINDS = ("train", "data", "eval")  # Job.kind values, each with a queue of the same name
# kombu's Redis transport keeps one list per priority step: `train`, `train\x06\x163`, `train\x06\x166`, ...
_PRIORITY_SEP = "\x06\x16"
_PRIORITY_STEPS = (0, 3, 6, 9)
TIMEOUT_S = 1.0


def broker_url() -> str:
    url = get_settings().redis_url
    if url:
        return url
    from training_platform.taskqueue.app import app

    return app.conf.broker_url


def _client() -> redis.Redis:
    return redis.Redis.from_url(broker_url(), socket_connect_timeout=TIMEOUT_S, socket_timeout=TIMEOUT_S)


def ping() -> bool:
    try:
        with _client() as client:
            return bool(client.ping())
    except (redis.RedisError, OSError, ValueError):
        return False


def queues() -> tuple[str, ...]:
    from training_platform.taskqueue.app import QUEUES

    return tuple(QUEUES)


def queue_depths() -> dict[str, int] | None:
    """Messages waiting per Celery queue, or None when the broker is unreachable (LLEN with short timeouts: a
    dashboard must not hang on a dead broker)."""
    names = queues()
    try:
        with _client() as client:
            pipe = client.pipeline()
            for queue in names:
                for step in _PRIORITY_STEPS:
                    pipe.llen(queue if step == 0 else f"{queue}{_PRIORITY_SEP}{step}")
            counts = pipe.execute()
    except (redis.RedisError, OSError, ValueError):
        return None
    n = len(_PRIORITY_STEPS)
    return {queue: int(sum(counts[i * n : (i + 1) * n])) for i, queue in enumerate(names)}

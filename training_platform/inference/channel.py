"""The Redis protocol between the API and the inference workers (the broker's Redis; one key family per request).

    API                                                     inference worker (queue `inference`)
    ZCOUNT workers (heartbeat newer than 15 s) == 0 -> 503
    send_task(generate, [rid, payload], expires)  ──────>   SET claim(rid) <worker> NX   (taken: skip the message)
    BLPOP events(rid) until the pickup deadline             RPUSH events(rid) {"type": "started"}
      nothing: SET claim(rid) "abandoned" NX -> 503           load (LRU cache), generate:
    BLPOP events(rid) ... (SSE: one event per token)        RPUSH events(rid) {"type": "token", "index", "text"} ...
      generation deadline passed: SET cancel(rid) -> 504    RPUSH events(rid) {"type": "done", ...} | {"type": "error"}
      client gone: SET cancel(rid)                          (cancel(rid) is polled between tokens: generation stops)

The claim is a compare-and-set both sides race for: either the worker owns the request (and the API waits for it)
or the API abandoned it (and a worker that takes the message later drops it). Every key expires on its own.
Workers announce themselves in a sorted set (member = Celery node name, score = last heartbeat, unix time).
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

PREFIX = "tp:inference"
WORKERS_KEY = f"{PREFIX}:workers"
HEARTBEAT_INTERVAL_S = 3.0
HEARTBEAT_STALE_S = 15.0  # a worker whose last heartbeat is older is not counted as alive
KEY_TTL_S = 600  # claim / events / cancel keys expire on their own (a crashed API or worker leaves nothing behind)
ABANDONED = "abandoned"
REQUEST_ID = re.compile(r"^[0-9a-f]{32}$")


def claim_key(request_id: str) -> str:
    return f"{PREFIX}:req:{request_id}:claim"


def events_key(request_id: str) -> str:
    return f"{PREFIX}:req:{request_id}:events"


def cancel_key(request_id: str) -> str:
    return f"{PREFIX}:req:{request_id}:cancel"


def inflight_key(user_id: int) -> str:
    return f"{PREFIX}:inflight:{user_id}"


def encode(event: dict[str, Any]) -> str:
    return json.dumps(event, ensure_ascii=False, separators=(",", ":"))


def decode(raw: bytes | str) -> dict[str, Any]:
    return json.loads(raw)


# ---------------------------------------------------------------------------------------------- worker side (sync)


class WorkerChannel:
    """One request, as its worker sees it (a sync redis client)."""

    def __init__(self, client, request_id: str, worker: str):
        if not REQUEST_ID.match(request_id):
            raise ValueError(f"malformed inference request id {request_id!r}")
        self.client = client
        self.request_id = request_id
        self.worker = worker
        self._checked_at = 0.0
        self._cancelled = False

    def claim(self) -> bool:
        """True if this worker now owns the request; False if the API gave up on it or another worker has it."""
        return bool(self.client.set(claim_key(self.request_id), self.worker, nx=True, ex=KEY_TTL_S))

    def push(self, event: dict[str, Any]) -> None:
        key = events_key(self.request_id)
        pipe = self.client.pipeline(transaction=False)
        pipe.rpush(key, encode(event))
        pipe.expire(key, KEY_TTL_S)
        pipe.execute()

    def cancelled(self, every_s: float = 0.2) -> bool:
        """Has the API asked to stop (timeout, client gone)? Asks Redis at most every `every_s` seconds."""
        if self._cancelled:
            return True
        now = time.monotonic()
        if now - self._checked_at >= every_s:
            self._checked_at = now
            self._cancelled = bool(self.client.exists(cancel_key(self.request_id)))
        return self._cancelled


def heartbeat(client, worker: str) -> None:
    now = time.time()
    pipe = client.pipeline(transaction=False)
    pipe.zadd(WORKERS_KEY, {worker: now})
    pipe.zremrangebyscore(WORKERS_KEY, "-inf", now - 10 * HEARTBEAT_STALE_S)  # forget long-dead workers
    pipe.execute()


def remove_worker(client, worker: str) -> None:
    client.zrem(WORKERS_KEY, worker)


def live_worker_floor(now: float | None = None) -> float:
    """The oldest heartbeat time that still counts as alive."""
    return (time.time() if now is None else now) - HEARTBEAT_STALE_S

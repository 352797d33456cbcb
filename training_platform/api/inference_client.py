"""The API's side of inference: hand a resolved request to the `inference` queue and await its events in Redis.

The API process never loads a model. `start()` checks that an inference worker is alive (heartbeats, see
`inference.channel`) and that the caller has fewer than TP_INFERENCE_MAX_INFLIGHT requests in progress, sends the
Celery message, and waits until a worker claimed the request (TP_INFERENCE_PICKUP_TIMEOUT, else 503 and the
request is abandoned: a worker that takes it later drops it). `Pending.events()` then yields the worker's token
events and its final `done` event, within TP_INFERENCE_TIMEOUT of the pickup (else `GenerationTimeout`: the
worker is told to stop). `Pending.close()` releases everything (and stops the worker when the client left early).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import redis
import redis.asyncio as aioredis
from fastapi import HTTPException, status
from starlette.concurrency import run_in_threadpool

from training_platform.api.errors import ValidationFailed
from training_platform.core.settings import Settings, get_settings
from training_platform.inference import channel

log = logging.getLogger("training_platform.api.inference")

POLL_S = 1.0  # BLPOP slice: deadlines are checked at least this often
GRACE_S = 2.0  # the worker stops itself at TP_INFERENCE_TIMEOUT; the API waits this much longer for its report


class GenerationTimeout(Exception):
    def __init__(self, timeout_s: float):
        super().__init__(f"the generation did not finish within TP_INFERENCE_TIMEOUT={timeout_s:g}s; it was stopped")
        self.timeout_s = timeout_s


@dataclass
class InferenceRequest:
    """A request whose model was resolved and authorized (`path` is the model directory; `label` its name).
    `messages` are chat messages (role, content; an assistant's `tool_calls` with arguments as objects, a tool
    result's `tool_call_id`); `tools` the OpenAI function schemas the chat template shows the model, or None."""

    path: str
    label: str
    messages: list[dict[str, Any]]
    max_new_tokens: int
    temperature: float
    top_p: float
    seed: int
    n: int = 1
    stop: list[str] = field(default_factory=list)
    tools: list[dict[str, Any]] | None = None

    def payload(self, timeout_s: float) -> dict[str, Any]:
        return {
            "path": self.path,
            "label": self.label,
            "messages": self.messages,
            "max_new_tokens": self.max_new_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "seed": self.seed,
            "n": self.n,
            "stop": self.stop,
            "tools": self.tools,
            "timeout_s": timeout_s,
        }


def unavailable(message: str) -> HTTPException:
    return HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, detail=message)


def _broker_url() -> str:
    from training_platform.api.broker import broker_url

    return broker_url()


def _send(request_id: str, payload: dict[str, Any], expires_s: float) -> None:
    from training_platform.taskqueue.app import INFERENCE_TASK, app

    app.send_task(INFERENCE_TASK, args=[request_id, payload], queue="inference", expires=expires_s)


class Pending:
    """A request a worker claimed. Iterate `events()` once; always `close()`."""

    def __init__(
        self,
        client: aioredis.Redis,
        request_id: str,
        user_id: int,
        settings: Settings,
        worker: str,
        submitted: float,
        picked_up: float,
    ):
        self.client = client
        self.request_id = request_id
        self.user_id = user_id
        self.settings = settings
        self.worker = worker
        self.queue_s = picked_up - submitted
        self.deadline = picked_up + settings.inference_timeout_s + GRACE_S
        self.finished = False
        self.closed = False

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        """Token events ({"type": "token", "index", "text"}), then the last one: {"type": "done", ...}. An `error`
        event is raised as the HTTPException it stands for; running out of time raises GenerationTimeout."""
        key = channel.events_key(self.request_id)
        while True:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise GenerationTimeout(self.settings.inference_timeout_s)
            try:
                item = await self.client.blpop([key], timeout=min(POLL_S, remaining))
            except (redis.RedisError, OSError) as exc:
                raise unavailable(
                    f"lost the connection to the broker (Redis) during generation: {type(exc).__name__}"
                ) from None
            if item is None:
                continue
            event = channel.decode(item[1])
            kind = event.get("type")
            if kind == "error":
                self.finished = True
                raise error_from_event(event)
            if kind == "done":
                self.finished = True
                if any(c.get("finish_reason") == "timeout" for c in event.get("choices", [])):
                    raise GenerationTimeout(self.settings.inference_timeout_s)
                event["timings"] = {**event.get("timings", {}), "queue_s": round(self.queue_s, 4)}
                yield event
                return
            if kind == "token":
                yield event

    async def result(self) -> dict[str, Any]:
        """The `done` event (the texts are in it): for answers that are not streamed."""
        done: dict[str, Any] | None = None
        async for event in self.events():
            if event["type"] == "done":
                done = event
        if done is None:  # pragma: no cover - events() ends with `done` or raises
            raise RuntimeError("the event stream ended without a result")
        return done

    async def close(self) -> None:
        """Release the caller's in-flight slot; tell the worker to stop if the answer was not complete. Shielded:
        also runs when the client went away (the request's task is being cancelled)."""
        if self.closed:
            return
        self.closed = True
        with anyio.CancelScope(shield=True):
            try:
                pipe = self.client.pipeline(transaction=False)
                if not self.finished:
                    pipe.set(channel.cancel_key(self.request_id), "1", ex=channel.KEY_TTL_S)
                pipe.delete(channel.events_key(self.request_id))
                pipe.decr(channel.inflight_key(self.user_id))
                await pipe.execute()
            except (redis.RedisError, OSError) as exc:
                log.warning("inference request %s: cleanup failed: %s", self.request_id, exc)
            finally:
                await self.client.aclose()


def error_from_event(event: dict[str, Any]) -> HTTPException:
    code = int(event.get("status") or 500)
    message = str(event.get("message") or "generation failed")
    if code == 422:
        return ValidationFailed([(str(event.get("loc") or "<body>"), message)])
    if code == 404:
        return HTTPException(status.HTTP_404_NOT_FOUND, detail=message)
    return HTTPException(status.HTTP_500_INTERNAL_SERVER_ERROR, detail=message)


async def start(request: InferenceRequest, user_id: int) -> Pending:
    """Send `request` to the inference workers and wait until one took it. Raises 503 (no worker, or none took it
    within TP_INFERENCE_PICKUP_TIMEOUT, or no broker) and 429 (too many requests of this user in progress)."""
    settings = get_settings()
    client = aioredis.Redis.from_url(_broker_url(), socket_connect_timeout=2, socket_timeout=POLL_S + 10)
    request_id = uuid.uuid4().hex
    counted = False
    try:
        try:
            live = await client.zcount(channel.WORKERS_KEY, channel.live_worker_floor(), "+inf")
        except (redis.RedisError, OSError) as exc:
            raise unavailable(f"the broker (Redis) is unreachable: {type(exc).__name__}") from None
        if not live:
            raise unavailable(
                "no inference worker is running: start one with `tp worker -Q inference` (`tp up` runs one)"
            )
        inflight = channel.inflight_key(user_id)
        pipe = client.pipeline(transaction=True)
        pipe.incr(inflight)
        pipe.expire(inflight, int(settings.inference_pickup_timeout_s + settings.inference_timeout_s + 60))
        count, _ = await pipe.execute()
        counted = True
        if count > settings.inference_max_inflight:
            raise HTTPException(
                status.HTTP_429_TOO_MANY_REQUESTS,
                detail=f"you have {settings.inference_max_inflight} generation requests in progress "
                f"already (TP_INFERENCE_MAX_INFLIGHT); wait for one to finish",
            )
        submitted = time.monotonic()
        pickup = settings.inference_pickup_timeout_s
        try:
            await run_in_threadpool(_send, request_id, request.payload(settings.inference_timeout_s), pickup + 5)
        except Exception as exc:  # noqa: BLE001 - kombu raises its own connection errors
            raise unavailable(f"could not queue the request on the broker: {type(exc).__name__}") from None
        worker = await _await_pickup(client, request_id, submitted + pickup, pickup)
        pending = Pending(client, request_id, user_id, settings, worker, submitted, time.monotonic())
        counted = False  # the pending request owns the slot and the client now
        return pending
    except BaseException:
        with anyio.CancelScope(shield=True):
            try:
                pipe = client.pipeline(transaction=False)
                pipe.set(channel.cancel_key(request_id), "1", ex=channel.KEY_TTL_S)
                if counted:
                    pipe.decr(channel.inflight_key(user_id))
                await pipe.execute()
            except (redis.RedisError, OSError):
                pass
            await client.aclose()
        raise


async def _await_pickup(client: aioredis.Redis, request_id: str, deadline: float, pickup_s: float) -> str:
    key = channel.events_key(request_id)
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            # Either we abandon the request (no worker will run it) or a worker claimed it just now: then wait on.
            if await client.set(channel.claim_key(request_id), channel.ABANDONED, nx=True, ex=channel.KEY_TTL_S):
                waiting = await _queue_length(client)
                raise unavailable(
                    f"no inference worker took the request within TP_INFERENCE_PICKUP_TIMEOUT="
                    f"{pickup_s:g}s (the inference workers are busy or stuck; {waiting} request(s) "
                    f"waiting); try again later"
                )
            deadline = time.monotonic() + 5.0
            continue
        item = await client.blpop([key], timeout=min(POLL_S, max(remaining, 0.01)))
        if item is None:
            continue
        event = channel.decode(item[1])
        if event.get("type") == "started":
            return str(event.get("worker") or "?")
        await client.lpush(key, item[1])  # picked up, but `started` was not first (never happens): leave it
        return "?"


async def _queue_length(client: aioredis.Redis) -> int:
    try:
        total = 0
        for suffix in ("", "\x06\x163", "\x06\x166", "\x06\x169"):
            total += int(await client.llen(f"inference{suffix}"))
        return total
    except (redis.RedisError, OSError):
        return 0

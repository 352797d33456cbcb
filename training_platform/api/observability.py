"""Request logging and request metrics, as one pure ASGI middleware (it does not buffer streamed responses).

The log line is `METHOD /path STATUS 12.3ms` (reads: `+0.4ms queued` after it): no query string, no headers, so
a token can never end up in a log.
Request counters and latency histograms (training_platform.core.telemetry: Prometheus, shared by every API process) are
labelled by the route template (`/api/v1/jobs/{job_id}`), not the raw path, so the number of series stays bounded
and no id or name ends up in a label.
"""

from __future__ import annotations

import asyncio
import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from training_platform.core import telemetry

log = logging.getLogger("training_platform.api.access")


def route_template(scope: Scope) -> str:
    """The matched route's full path template. FastAPI >= 0.16x keeps included routers nested (scope["route"] is
    the route relative to its router); its effective route context has the full template."""
    context = (
        (scope.get("fastapi") or {}).get("effective_route_context") if isinstance(scope.get("fastapi"), dict) else None
    )
    for candidate in (context, scope.get("route")):
        template = getattr(candidate, "path_format", None) or getattr(candidate, "path", None)
        if isinstance(template, str) and template:
            return template
    return "<unmatched>"


class ObservabilityMiddleware:
    """Times, counts and logs every request; admits at most TP_API_CONCURRENCY reads (GET/HEAD) at a time into
    this process (0: no limit). Sync routes run in a thread pool under one GIL: fifty reads handled at once each
    take fifty times as long and the process gets no more done, so reads beyond the limit wait here, first come
    first served, until an admitted one has started its response (a stream frees its slot with its headers). The
    wait is reported apart (`tp_http_request_queue_seconds`, `+N.Nms queued` in the log line); the handling time
    (`tp_http_request_duration_seconds`) starts once admitted."""

    def __init__(self, app: ASGIApp, concurrency: int | None = None) -> None:
        self.app = app
        if concurrency is None:
            from training_platform.core.settings import get_settings

            concurrency = get_settings().api_concurrency
        self.concurrency = concurrency
        self._gates: dict[int, asyncio.Semaphore] = {}  # per event loop (tests run several)

    def _gate(self) -> asyncio.Semaphore:
        loop = id(asyncio.get_running_loop())
        gate = self._gates.get(loop)
        if gate is None:
            gate = self._gates[loop] = asyncio.Semaphore(self.concurrency)
        return gate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method = scope.get("method", "?")
        gate = self._gate() if self.concurrency > 0 and method in ("GET", "HEAD") else None
        arrived = time.perf_counter()
        if gate is not None:
            await gate.acquire()
        start = time.perf_counter()
        status_holder = [500]
        held = [gate is not None]

        def release() -> None:
            if held[0] and gate is not None:
                held[0] = False
                gate.release()

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status_holder[0] = message["status"]
                release()
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            release()
            elapsed = time.perf_counter() - start
            queued = start - arrived
            template = route_template(scope)
            try:
                telemetry.observe_request(
                    method, template, status_holder[0], elapsed, queued if gate is not None else None
                )
            except Exception:  # noqa: BLE001 - a metrics failure must not turn into a failed request
                log.exception("could not record request metrics")
            if gate is not None:
                log.info(
                    "%s %s %d %.1fms +%.1fms queued",
                    method,
                    scope.get("path", ""),
                    status_holder[0],
                    elapsed * 1000,
                    queued * 1000,
                )
            else:
                log.info("%s %s %d %.1fms", method, scope.get("path", ""), status_holder[0], elapsed * 1000)

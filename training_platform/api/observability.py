"""Request logging and request metrics, as one pure ASGI middleware (it does not buffer streamed responses).

The log line is `METHOD /path STATUS 12.3ms`: no query string, no headers, so a token can never end up in a log.
Request counters and latency histograms (training_platform.telemetry: Prometheus, shared by every API process) are
labelled by the route template (`/api/v1/jobs/{job_id}`), not the raw path, so the number of series stays bounded
and no id or name ends up in a label.
"""

from __future__ import annotations

import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from training_platform import telemetry

log = logging.getLogger("training_platform.api.access")


def route_template(scope: Scope) -> str:
    """The matched route's full path template. FastAPI >= 0.16x keeps included routers nested (scope["route"] is
    the route relative to its router); its effective route context has the full template."""
    context = (scope.get("fastapi") or {}).get("effective_route_context") if isinstance(scope.get("fastapi"), dict) \
        else None
    for candidate in (context, scope.get("route")):
        template = getattr(candidate, "path_format", None) or getattr(candidate, "path", None)
        if isinstance(template, str) and template:
            return template
    return "<unmatched>"


class ObservabilityMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status_holder = [500]

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status_holder[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            elapsed = time.perf_counter() - start
            template = route_template(scope)
            method = scope.get("method", "?")
            try:
                telemetry.observe_request(method, template, status_holder[0], elapsed)
            except Exception:  # noqa: BLE001 - a metrics failure must not turn into a failed request
                log.exception("could not record request metrics")
            log.info("%s %s %d %.1fms", method, scope.get("path", ""), status_holder[0], elapsed * 1000)

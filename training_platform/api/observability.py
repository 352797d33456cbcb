"""Request logging and request metrics, as one pure ASGI middleware (it does not buffer streamed responses).

The log line is `METHOD /path STATUS 12.3ms`: no query string, no headers, so a token can never end up in a log.
Request counters are labelled by the route template (`/api/v1/jobs/{job_id}`), not the raw path, so the number
of series stays bounded.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict

from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("training_platform.api.access")


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class RequestMetrics:
    """In-process counters in the Prometheus text format 0.0.4."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, str, str], int] = defaultdict(int)
        self.durations: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0])

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        with self._lock:
            self.requests[(method, route, str(status))] += 1
            entry = self.durations[(method, route)]
            entry[0] += seconds
            entry[1] += 1

    def render(self) -> list[str]:
        with self._lock:
            requests = sorted(self.requests.items())
            durations = sorted((k, tuple(v)) for k, v in self.durations.items())
        lines = ["# HELP tp_http_requests_total HTTP requests handled by the API.",
                 "# TYPE tp_http_requests_total counter"]
        for (method, route, status), count in requests:
            lines.append(f'tp_http_requests_total{{method="{_escape(method)}",route="{_escape(route)}",'
                         f'status="{status}"}} {count}')
        lines += ["# HELP tp_http_request_duration_seconds Time spent handling HTTP requests.",
                  "# TYPE tp_http_request_duration_seconds summary"]
        for (method, route), (total, count) in durations:
            labels = f'method="{_escape(method)}",route="{_escape(route)}"'
            lines.append(f"tp_http_request_duration_seconds_sum{{{labels}}} {total:.6f}")
            lines.append(f"tp_http_request_duration_seconds_count{{{labels}}} {count}")
        return lines


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
    def __init__(self, app: ASGIApp, metrics: RequestMetrics) -> None:
        self.app = app
        self.metrics = metrics

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
            self.metrics.observe(method, template, status_holder[0], elapsed)
            log.info("%s %s %d %.1fms", method, scope.get("path", ""), status_holder[0], elapsed * 1000)

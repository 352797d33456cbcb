"""Request body caps, enforced before anything parses a body (docs/limits.md).

`BodyLimitMiddleware` refuses a request whose body is larger than `TP_MAX_BODY_MB` with 413: at once when its
Content-Length says so, else while the body streams in (chunked bodies), by counting the bytes the application
receives. The dataset upload (`POST /api/v1/datasets`, multipart) is the one route with its own, larger cap
(`TP_MAX_UPLOAD_MB`): it streams the file to disk and counts itself.

Before answering 413 the rest of the body is read and dropped, up to `DRAIN_BYTES` (memory stays flat): a client
that sends its whole body before reading the answer (most HTTP libraries) then gets the 413 instead of a reset
connection. A client that asked `Expect: 100-continue` gets the 413 before it sends anything.
"""

from __future__ import annotations

import json

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from training_platform.core.settings import get_settings

MB = 1024 * 1024
DRAIN_BYTES = 512 * MB  # read and dropped at most, before a 413, so the client reads the answer


class BodyTooLarge(HTTPException):
    """Raised from `receive` once the body passes the cap (FastAPI re-raises HTTPExceptions met while it reads a
    body, so its handler answers 413 with this detail)."""

    def __init__(self, detail: str):
        super().__init__(status_code=413, detail=detail)


def body_too_large_detail(limit_bytes: int) -> str:
    return f"the request body is larger than the limit of {limit_bytes / MB:g} MB (TP_MAX_BODY_MB); it was not read"


def content_length(scope: Scope) -> int | None:
    for key, value in scope.get("headers") or ():
        if key == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def expects_continue(scope: Scope) -> bool:
    return any(k == b"expect" and v.lower() == b"100-continue" for k, v in scope.get("headers") or ())


async def drain(receive: Receive, budget: int = DRAIN_BYTES) -> None:
    """Read and drop what is left of the request body (at most `budget` bytes)."""
    seen = 0
    while seen <= budget:
        message = await receive()
        if message["type"] != "http.request":
            return
        seen += len(message.get("body", b""))
        if not message.get("more_body", False):
            return


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, exempt: set[tuple[str, str]] | None = None) -> None:
        self.app = app
        self.exempt = exempt or set()  # (method, path) with a cap of their own

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (scope.get("method"), scope.get("path", "").rstrip("/")) in self.exempt:
            await self.app(scope, receive, send)
            return
        limit = int(get_settings().max_body_mb * MB)
        detail = body_too_large_detail(limit)
        declared = content_length(scope)
        if declared is not None and declared > limit:
            if not expects_continue(scope):
                await drain(receive)
            await _answer_413(send, detail)
            return

        state = {"received": 0, "over": False, "started": False, "done": False}

        async def limited_receive() -> Message:
            if state["over"]:
                raise BodyTooLarge(detail)
            message = await receive()
            if message["type"] == "http.request":
                state["received"] += len(message.get("body", b""))
                state["done"] = not message.get("more_body", False)
                if state["received"] > limit:
                    state["over"] = True
                    raise BodyTooLarge(detail)
            return message

        async def tracking_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                if state["over"] and not state["done"]:
                    await drain(receive)
                    state["done"] = True
                state["started"] = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge:
            if state["started"]:
                raise
            if not state["done"]:
                await drain(receive)
            await _answer_413(send, detail)


async def _answer_413(send: Send, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})

"""The API's read admission (api/observability.py): at most N reads handled at once per process, the rest wait in
arrival order; a response that has started (a stream) frees its slot; writes are never held back."""

from __future__ import annotations

import asyncio

import pytest

from training_platform.api import observability
from training_platform.api.observability import ObservabilityMiddleware


@pytest.fixture(autouse=True)
def _no_metrics(monkeypatch):
    """The middleware's Prometheus calls would write under the default data dir: not what these tests are about."""
    monkeypatch.setattr(observability.telemetry, "observe_request", lambda *a, **k: None)


def _scope(method: str, path: str) -> dict:
    return {"type": "http", "method": method, "path": path, "headers": []}


def test_reads_beyond_the_limit_wait_and_a_started_stream_frees_its_slot():
    running: list[str] = []
    peak = [0]
    release_stream = asyncio.Event()

    async def app(scope, receive, send):
        running.append(scope["path"])
        peak[0] = max(peak[0], len(running))
        if scope["path"] == "/stream":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            running.remove(scope["path"])  # handling done; the body keeps streaming
            await release_stream.wait()
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        await asyncio.sleep(0.02)
        running.remove(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def main():
        mw = ObservabilityMiddleware(app, concurrency=1)
        sent: list[tuple[str, int]] = []

        async def call(method, path):
            async def receive():
                return {"type": "http.request", "body": b""}

            async def send(message):
                if message["type"] == "http.response.start":
                    sent.append((path, message["status"]))

            await mw(_scope(method, path), receive, send)

        stream = asyncio.create_task(call("GET", "/stream"))
        await asyncio.sleep(0.01)
        # The stream holds no slot once its headers are out: these reads go through, one at a time.
        reads = [asyncio.create_task(call("GET", f"/r{i}")) for i in range(5)]
        await asyncio.wait_for(asyncio.gather(*reads), 5)
        assert peak[0] == 1
        assert [p for p, _ in sent] == ["/stream", "/r0", "/r1", "/r2", "/r3", "/r4"]  # first come, first served
        # Writes are not admitted through the gate.
        peak[0] = 0
        await asyncio.wait_for(asyncio.gather(*(call("POST", f"/w{i}") for i in range(3))), 5)
        assert peak[0] == 3
        release_stream.set()
        await stream

    asyncio.run(main())


def test_no_limit_when_zero():
    peak = [0, 0]

    async def app(scope, receive, send):
        peak[0] += 1
        peak[1] = max(peak[1], peak[0])
        await asyncio.sleep(0.01)
        peak[0] -= 1
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def main():
        mw = ObservabilityMiddleware(app, concurrency=0)

        async def receive():
            return {"type": "http.request", "body": b""}

        async def send(message):
            return None

        await asyncio.gather(*(mw(_scope("GET", "/x"), receive, send) for _ in range(6)))

    asyncio.run(main())
    assert peak[1] == 6

"""A scripted OpenAI-compatible server for the `http_endpoint` tool's tests: it records every request (path, headers,
body) and answers as told: a chat completion with `content`, an HTTP `status`, a redirect to `location`, a body of
`size` bytes, or a reply after `delay_s`. `key`, when set, is the Bearer key it demands (401 otherwise), as
judge_helpers.JudgeServer does."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class StubChatServer:
    def __init__(self, *, key: str | None = None):
        self.key = key
        self.requests: list[dict[str, Any]] = []
        self.content: str | None = "stub answer"
        self.status = 200
        self.location: str | None = None
        self.size: int | None = None
        self.delay_s = 0.0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                server.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                if server.delay_s:
                    time.sleep(server.delay_s)
                if server.key is not None and self.headers.get("Authorization") != f"Bearer {server.key}":
                    return self._send(401, b'{"error": "bad key"}')
                if server.location is not None:
                    self.send_response(302)
                    self.send_header("Location", server.location)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return None
                if server.size is not None:
                    return self._send(200, b"x" * server.size)
                message = {"role": "assistant", "content": server.content}
                reply = {"id": "c1", "object": "chat.completion", "model": body.get("model"), "choices": []}
                reply["choices"].append({"index": 0, "finish_reason": "stop", "message": message})
                return self._send(server.status, json.dumps(reply).encode())

            def _send(self, status: int, data: bytes):
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (the timeout test)
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> StubChatServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

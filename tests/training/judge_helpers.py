"""A small OpenAI-compatible judge server for tests that really generates: the demo model (transformers `generate`,
greedy unless a temperature is asked) answers `POST /v1/chat/completions` in a thread of the test process.

Its decoding is constrained to one ASCII digit token (what vLLM's `guided_choice` does for a real judge): the tiny
demo model is untrained and would otherwise rarely write a number, so without it no reply would carry a score. The
digit is the model's own choice for the rendered judge prompt: different prompts/completions get different scores,
identical ones the same. `calls` counts the requests it answered; `key`, when set, is the Bearer key it demands.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class JudgeServer:
    def __init__(self, model_dir: Path, *, key: str | None = None):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        self.model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
        self.digits = sorted(i for t, i in self.tokenizer.get_vocab().items() if len(t) == 1 and t in "0123456789")
        assert len(self.digits) == 10, "the demo tokenizer has the ten digits"
        self.key = key
        self.calls = 0
        self.unauthorized = 0
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                if not self.path.endswith("/chat/completions"):
                    return self._send(404, {"error": "not found"})
                if server.key is not None and self.headers.get("Authorization") != f"Bearer {server.key}":
                    server.unauthorized += 1
                    return self._send(401, {"error": "bad key"})
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                text = server.generate(body["messages"], float(body.get("temperature") or 0.0))
                self._send(
                    200,
                    {
                        "id": f"chatcmpl-{server.calls}",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": body["model"],
                        "choices": [
                            {"index": 0, "finish_reason": "length", "message": {"role": "assistant", "content": text}}
                        ],
                    },
                )

            def _send(self, status: int, payload: dict):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def generate(self, messages: list[dict], temperature: float) -> str:
        import torch

        inputs = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        sample = temperature > 0
        with self._lock, torch.inference_mode():
            self.calls += 1
            out = self.model.generate(
                **inputs,
                max_new_tokens=1,
                do_sample=sample,
                temperature=temperature if sample else None,
                top_k=None,
                top_p=None,
                prefix_allowed_tokens_fn=lambda batch, ids: self.digits,
                pad_token_id=self.tokenizer.eos_token_id,
            )
        return self.tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)

    def __enter__(self) -> JudgeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

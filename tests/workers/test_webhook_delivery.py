"""Job-end webhooks end to end: a job ends through the supervisor's own code path (services.jobs.transition in
JobLease.finish), the notification goes through the broker to a real `celery worker -Q maintenance`, which
POSTs it, signed, to a real HTTP receiver on 127.0.0.1 (the operator's TP_WEBHOOK_HOSTS names it); 5xx answers are
retried with backoff; the outcome is recorded on the webhook row."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from _wk import sft_config, wait_for

from training_platform.db.models import Webhook
from training_platform.db.session import session_scope
from training_platform.services.webhooks import EVENTS
from training_platform.workers.supervisor import run_next_job

pytestmark = pytest.mark.integration

SECRET = "whsec-4f1d2c-never-in-logs"


class Receiver:
    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.script: dict[str, list[int]] = {}  # path -> status codes to answer in turn (then 200)
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver.lock:
                    receiver.requests.append(
                        {"path": self.path, "headers": dict(self.headers), "body": body, "t": time.monotonic()}
                    )
                    codes = receiver.script.get(self.path) or []
                    code = codes.pop(0) if codes else 200
                self.send_response(code)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def at(self, path: str) -> list[dict]:
        with self.lock:
            return [r for r in self.requests if r["path"] == path]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def receiver():
    r = Receiver()
    yield r
    r.close()


@pytest.fixture(scope="module")
def hook_worker(platform, receiver):
    return platform.start_worker(
        "hooks",
        queues="maintenance",
        env={"TP_WEBHOOK_HOSTS": f"127.0.0.1:{receiver.port}", "TP_WEBHOOK_BACKOFF": "0.1"},
    )


def _webhook(owner, url: str, events, secret: str | None = None) -> int:
    with session_scope() as s:
        row = Webhook(owner_id=owner.id, url=url, events=list(events), secret=secret)
        s.add(row)
        s.flush()
        return row.id


def _row(webhook_id: int) -> Webhook:
    with session_scope() as s:
        row = s.get(Webhook, webhook_id)
        s.expunge(row)
        return row


def _end_job(platform, *, cancel: bool) -> int:
    """Submit a job and run it here through the supervisor: cancelled before it starts, or failed by the path policy
    (a model outside every area the owner may read). Either ends in JobLease.finish -> jobs.transition."""
    config = sft_config(5)
    if not cancel:
        config["model"]["path"] = "/etc"
    job_id = platform.submit(config, name="hooked", wake=False)
    if cancel:
        platform.set_cancel(job_id)
    assert run_next_job("train", worker="hook-test@local") == job_id
    return job_id


def test_signed_delivery_when_a_job_ends(platform, receiver, hook_worker):
    alice, bob = platform.user("alice"), platform.user("bob")
    hook = _webhook(alice, f"{receiver.url}/ok?k=1", ["job.cancelled", "job.failed"], secret=SECRET)
    succeeded_only = _webhook(alice, f"{receiver.url}/succeeded-only", ["job.succeeded"])
    bobs = _webhook(bob, f"{receiver.url}/bob", EVENTS)
    # A row written around the API with a host the operator does not allow: never called.
    other_host = _webhook(alice, "http://127.0.0.2:9/x", ["job.cancelled"])

    job_id = _end_job(platform, cancel=True)
    job = platform.job(job_id)
    assert job.status == "cancelled"

    [request] = wait_for(lambda: receiver.at("/ok?k=1"), 30, what="the webhook POST")
    body, headers = request["body"], request["headers"]
    assert headers["X-TP-Signature"] == "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    assert headers["X-TP-Event"] == "job.cancelled" and headers["Content-Type"] == "application/json"
    assert headers["X-TP-Delivery-Attempt"] == "1"
    payload = json.loads(body)
    assert payload["event"] == "job.cancelled" and payload["ts"]
    assert payload["job"]["id"] == job_id and payload["job"]["status"] == "cancelled"
    assert payload["job"]["kind"] == "train" and payload["job"]["algorithm"] == "sft"
    assert payload["job"]["name"] == "hooked" and payload["job"]["finished_at"]
    assert "config" not in payload["job"] and SECRET not in body.decode()

    done = wait_for(lambda: (r := _row(hook)).last_status_code == 200 and r, 15, what="the recorded delivery")
    assert done.last_error is None and done.last_event == "job.cancelled" and done.last_job_id == job_id
    refused = wait_for(lambda: (r := _row(other_host)).last_error and r, 15, what="the refused delivery")
    assert refused.last_error.startswith("refused") and "TP_WEBHOOK_HOSTS" in refused.last_error
    time.sleep(1.0)
    assert not receiver.at("/succeeded-only") and not receiver.at("/bob")  # other events, another user
    assert _row(succeeded_only).last_delivery_at is None and _row(bobs).last_delivery_at is None
    assert SECRET not in hook_worker.log()


def test_retried_on_500_then_given_up(platform, receiver, hook_worker):
    alice = platform.user("alice")
    receiver.script["/flaky"] = [500, 503]
    receiver.script["/down"] = [500] * 10
    flaky = _webhook(alice, f"{receiver.url}/flaky", ["job.failed"], secret=SECRET)
    down = _webhook(alice, f"{receiver.url}/down", ["job.failed"])

    job_id = _end_job(platform, cancel=False)
    job = platform.job(job_id)
    assert job.status == "failed" and job.error

    attempts = wait_for(lambda: len(got := receiver.at("/flaky")) >= 3 and got, 30, what="3 attempts")
    assert [r["headers"]["X-TP-Delivery-Attempt"] for r in attempts] == ["1", "2", "3"]
    assert len({r["body"] for r in attempts}) == 1  # the same signed body each time
    assert attempts[2]["t"] - attempts[0]["t"] >= 0.1 * (1 + 4) * 0.9  # backoff 1x, 4x TP_WEBHOOK_BACKOFF
    payload = json.loads(attempts[0]["body"])
    assert payload["event"] == "job.failed" and payload["job"]["status"] == "failed"
    assert payload["job"]["error"] == job.error
    row = wait_for(lambda: (r := _row(flaky)).last_status_code == 200 and r, 15, what="the recorded success")
    assert row.last_attempts == 3 and row.last_error is None

    wait_for(lambda: len(receiver.at("/down")) >= 4, 30, what="4 attempts")
    row = wait_for(lambda: (r := _row(down)).last_attempts == 4 and r, 15, what="the recorded failure")
    assert row.last_status_code == 500 and row.last_error == "HTTP 500 (gave up after 4 attempts)"
    time.sleep(0.5)
    assert len(receiver.at("/down")) == 4  # 3 retries, no more
    assert platform.job(job_id).status == "failed"  # the job's outcome never depends on its webhooks

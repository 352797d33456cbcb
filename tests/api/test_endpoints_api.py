"""Named outbound endpoints (`/api/v1/endpoints`, `backend.endpoint`), with real local HTTP listeners:

- the exfiltration test: planted HF_TOKEN / OPENAI_API_KEY / operator key values; a plain user tries every way to
  point a keyed call at their own listener (a base_url, an api_key_env, an unknown endpoint, an operator endpoint
  whose host redirects to the listener, schedules); the listener never receives a key, no response body carries
  a planted value;
- admin CRUD, what plain users see, environment endpoints read-only, file:// and other schemes refused;
- a real evaluation (`backend: openai`) through a named endpoint against a local fake OpenAI server, run by the
  eval worker's code in this process: the key reaches that server and nothing else.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from api_helpers import running_api

from training_platform.db.models import Evaluation, Job
from training_platform.db.session import session_scope

pytestmark = pytest.mark.integration

# Key-shaped values, assembled so no scanner mistakes the test for a leak.
HF_SECRET = "hf_" + "PlantedHubToken" + "0123456789abcdef"
OPENAI_SECRET = "sk-" + "planted-openai-" + "0123456789abcdef"
OPERATOR_SECRET = "sk-" + "operator-endpoint-" + "0123456789abcdef"
SECRETS = (HF_SECRET, OPENAI_SECRET, OPERATOR_SECRET)
GSM8K = {"name": "gsm8k", "data": "demo/data/gsm8k_eval.jsonl", "limit": 2}


# ---------------------------------------------------------------------------------------------- listeners


@dataclass
class Listener:
    """A local HTTP server in a thread recording every request. As the operator's fake OpenAI server it answers
    /chat/completions and /completions; under /bounce/ it redirects (307) to `redirect_to` + the rest."""

    server: ThreadingHTTPServer
    requests: list[dict] = field(default_factory=list)
    redirect_to: str | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def saw(self, text: str) -> bool:
        return any(text in json.dumps(r) for r in self.requests)


def _handler(listener_ref: list[Listener]):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def _record(self) -> dict:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length).decode("utf-8", "replace") if length else ""
            entry = {"method": self.command, "path": self.path, "headers": dict(self.headers.items()), "body": body}
            listener_ref[0].requests.append(entry)
            return entry

        def _send(self, code: int, payload: dict | None = None, headers: dict | None = None) -> None:
            data = json.dumps(payload or {}).encode()
            self.send_response(code)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802 - http.server API
            self._record()
            self._send(200, {"ok": True})

        def do_POST(self):  # noqa: N802
            entry = self._record()
            listener = listener_ref[0]
            if self.path.startswith("/bounce/") and listener.redirect_to:
                self._send(307, headers={"Location": listener.redirect_to + self.path.removeprefix("/bounce")})
                return
            body = json.loads(entry["body"] or "{}")
            n = body.get("n", 1)
            if self.path.endswith("/chat/completions"):
                choices = [
                    {"message": {"role": "assistant", "content": "The answer. #### 4"}, "finish_reason": "stop"}
                    for _ in range(n)
                ]
            else:
                choices = [{"text": " #### 4", "finish_reason": "stop"} for _ in range(n)]
            self._send(200, {"choices": choices})

    return Handler


@pytest.fixture(scope="module")
def listeners() -> Iterator[tuple[Listener, Listener]]:
    """(the plain user's listener, the operator's fake OpenAI server that also bounces /bounce/ to the user's)."""
    made = []
    for _ in range(2):
        ref: list[Listener] = []
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(ref))
        ref.append(Listener(server))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        made.append(ref[0])
    attacker, operator = made
    operator.redirect_to = attacker.url
    yield attacker, operator
    for listener in made:
        listener.server.shutdown()
        listener.server.server_close()


@pytest.fixture(scope="module")
def api(data_dir, redis_client, db_url, listeners):
    """The API with the operator's endpoints and planted secrets, on SQLite and on PostgreSQL."""
    attacker, operator = listeners
    endpoints = {
        "good": {"base_url": f"{operator.url}/v1", "api_key_env": "OPERATOR_KEY", "models": ["served-model"]},
        "bouncy": {"base_url": f"{operator.url}/bounce/v1", "api_key_env": "OPERATOR_KEY"},
    }
    env = {
        "TP_ENDPOINTS": json.dumps(endpoints),
        "HF_TOKEN": HF_SECRET,
        "OPENAI_API_KEY": OPENAI_SECRET,
        "OPERATOR_KEY": OPERATOR_SECRET,
    }
    with running_api(data_dir, db_url, **env) as api:
        yield api


@pytest.fixture(autouse=True)
def _fresh_listeners(listeners):
    for listener in listeners:
        listener.requests.clear()


def _no_secret(response) -> None:
    for secret in SECRETS:
        assert secret not in response.text, response.text


def _locs(response) -> dict[str, str]:
    assert response.status_code == 422, response.text
    _no_secret(response)
    return {e["loc"]: e["msg"] for e in response.json()["detail"]}


def _run_queued_evaluations() -> list[int]:
    from training_platform.workers.eval_tasks import EvalJobSupervisor
    from training_platform.workers.supervisor import run_next_job

    done = []
    while (job_id := run_next_job("eval", worker="test-worker:1", supervisor_class=EvalJobSupervisor)) is not None:
        done.append(job_id)
    return done


def _evaluation(backend: dict, model: str = "served-model", **extra) -> dict:
    return {"benchmarks": [GSM8K], "generation": {"max_new_tokens": 16}, "backend": backend, "model": model, **extra}


# ---------------------------------------------------------------------------------------------- visibility, CRUD


def test_users_see_names_and_models_admins_also_see_where(api):
    users = api.get("/endpoints", "alice")
    assert users.status_code == 200, users.text
    items = {e["name"]: e for e in users.json()["items"]}
    assert items["good"] == {
        "name": "good",
        "models": ["served-model"],
        "source": "env",
        "base_url": None,
        "api_key_env": None,
    }
    assert "127.0.0.1" not in users.text and "OPERATOR_KEY" not in users.text
    admin = {e["name"]: e for e in api.get("/endpoints", "root").json()["items"]}
    assert admin["good"]["base_url"].endswith("/v1") and admin["good"]["api_key_env"] == "OPERATOR_KEY"
    one = api.get("/endpoints/bouncy", "bob")
    assert one.status_code == 200 and one.json()["base_url"] is None
    assert api.get("/endpoints/nope", "bob").status_code == 404
    assert api.client.get("/api/v1/endpoints").status_code == 401
    for response in (users, one):
        _no_secret(response)


def test_admins_manage_endpoints_plain_users_cannot(api):
    spec = {
        "name": "judge-a",
        "base_url": "https://judge.example.com/v1/",
        "api_key_env": "JUDGE_A_KEY",
        "models": ["m1", "m2"],
    }
    assert api.post("/endpoints", "alice", json=spec).status_code == 403
    created = api.post("/endpoints", "root", json=spec)
    assert created.status_code == 201, created.text
    assert created.json() == {
        "name": "judge-a",
        "models": ["m1", "m2"],
        "source": "admin",
        "base_url": "https://judge.example.com/v1",
        "api_key_env": "JUDGE_A_KEY",
    }
    assert api.post("/endpoints", "root", json=spec).status_code == 409  # the name is taken
    seen = {e["name"]: e for e in api.get("/endpoints", "alice").json()["items"]}
    assert seen["judge-a"] == {
        "name": "judge-a",
        "models": ["m1", "m2"],
        "source": "admin",
        "base_url": None,
        "api_key_env": None,
    }

    patch = api.client.patch("/api/v1/endpoints/judge-a", headers=api.h("alice"), json={"models": []})
    assert patch.status_code == 403
    patch = api.client.patch(
        "/api/v1/endpoints/judge-a", headers=api.h("root"), json={"models": ["m3"], "api_key_env": None}
    )
    assert patch.status_code == 200, patch.text
    assert patch.json()["models"] == ["m3"] and patch.json()["api_key_env"] is None
    bad = api.client.patch("/api/v1/endpoints/judge-a", headers=api.h("root"), json={"base_url": "file:///etc"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == "base_url"
    assert api.client.patch("/api/v1/endpoints/missing", headers=api.h("root"), json={}).status_code == 404

    assert api.delete("/endpoints/judge-a", "bob").status_code == 403
    assert api.delete("/endpoints/judge-a", "root").status_code == 204
    assert api.get("/endpoints/judge-a", "root").status_code == 404
    assert api.delete("/endpoints/judge-a", "root").status_code == 404


def test_environment_endpoints_are_read_only(api):
    clash = api.post("/endpoints", "root", json={"name": "good", "base_url": "http://127.0.0.1:9/v1"})
    assert clash.status_code == 409 and "operator" in clash.json()["detail"]
    patch = api.client.patch("/api/v1/endpoints/good", headers=api.h("root"), json={"models": []})
    assert patch.status_code == 409
    assert api.delete("/endpoints/good", "root").status_code == 409
    assert api.get("/endpoints/good", "root").json()["models"] == ["served-model"]


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "ftp://files.example.com/v1",
        "gopher://127.0.0.1:6379/_INFO",
        "javascript:alert(1)",
        "data:text/plain,hi",
        "unix:///var/run/docker.sock",
        "//127.0.0.1/v1",
        "127.0.0.1:8000/v1",
    ],
)
def test_only_http_and_https_urls(api, url):
    response = api.post("/endpoints", "root", json={"name": "bad", "base_url": url})
    locs = _locs(response)
    assert "only http:// and https:// URLs are allowed" in locs["base_url"], locs


@pytest.mark.parametrize(
    ("body", "loc", "message"),
    [
        ({"name": "x", "base_url": "http://user:pw@example.com/v1"}, "base_url", "no user:password"),
        ({"name": "x", "base_url": "http://example.com/v1?key=1"}, "base_url", "no query string"),
        ({"name": "x", "base_url": "http:///v1"}, "base_url", "has no host"),
        ({"name": "platform", "base_url": "http://example.com/v1"}, "name", "reserved"),
        ({"name": "../x", "base_url": "http://example.com/v1"}, "name", "an endpoint name is"),
        (
            {"name": "x", "base_url": "http://example.com/v1", "api_key_env": "DATABASE_URL"},
            "api_key_env",
            "a setting of the platform itself",
        ),
        (
            {"name": "x", "base_url": "http://example.com/v1", "api_key_env": "A B"},
            "api_key_env",
            "environment variable",
        ),
        ({"name": "x", "base_url": "http://example.com/v1", "api_key": "sk-x"}, "api_key", "unknown field"),
    ],
)
def test_endpoint_definitions_are_checked(api, body, loc, message):
    locs = _locs(api.post("/endpoints", "root", json=body))
    assert message in locs.get(loc, ""), locs


# ---------------------------------------------------------------------------------------------- exfiltration


def test_requests_cannot_choose_where_a_key_goes(api, listeners):
    attacker, _ = listeners
    before = api.get("/evaluations", "root").json()["total"]
    attempts = {
        "backend.base_url": {"backend": "openai", "endpoint": "good", "base_url": f"{attacker.url}/v1"},
        "backend.api_key_env": {"backend": "openai", "endpoint": "good", "api_key_env": "HF_TOKEN"},
        "backend.api_key": {"backend": "openai", "endpoint": "good", "api_key": "OPENAI_API_KEY"},
    }
    for loc, backend in attempts.items():
        locs = _locs(api.post("/evaluations", "alice", json=_evaluation(backend)))
        assert loc in locs and "the operator defines where requests go" in locs[loc], locs
    unknown = _locs(api.post("/evaluations", "alice", json=_evaluation({"backend": "openai", "endpoint": "mine"})))
    assert "unknown endpoint 'mine'" in unknown["backend.endpoint"]
    missing = _locs(api.post("/evaluations", "alice", json=_evaluation({"backend": "openai"})))
    assert "needs `endpoint`" in missing["backend.endpoint"]
    not_served = _locs(
        api.post(
            "/evaluations", "alice", json=_evaluation({"backend": "openai", "endpoint": "good"}, model="gpt-other")
        )
    )
    assert "serves 'served-model'; not 'gpt-other'" in not_served["model"]
    url_as_name = _locs(
        api.post("/evaluations", "alice", json=_evaluation({"backend": "openai", "endpoint": f"{attacker.url}/v1"}))
    )
    assert "backend.endpoint" in url_as_name
    wrong_backend = _locs(api.post("/evaluations", "alice", json=_evaluation({"endpoint": "good"}, model="demo/model")))
    assert wrong_backend["backend.endpoint"] == "only with backend 'openai'"

    schedule = {
        "name": "nightly",
        "trigger": "cron",
        "cron": "0 3 * * *",
        "model": "served-model",
        "benchmarks": [GSM8K],
    }
    for backend, loc in (
        ({"backend": "openai", "endpoint": "good", "base_url": attacker.url}, "backend.base_url"),
        ({"backend": "openai", "endpoint": "good", "api_key_env": "HF_TOKEN"}, "backend.api_key_env"),
        ({"backend": "openai", "endpoint": "nope"}, "backend.endpoint"),
    ):
        assert loc in _locs(api.post("/schedules", "alice", json={**schedule, "backend": backend}))
    # defining their own endpoint is the admins' (403), and naming it afterwards finds nothing
    for user in ("alice", "bob"):
        own = api.post(
            "/endpoints", user, json={"name": "mine", "base_url": f"{attacker.url}/v1", "api_key_env": "HF_TOKEN"}
        )
        assert own.status_code == 403
        _no_secret(own)
    assert api.get("/endpoints/mine", "root").status_code == 404
    assert "backend.endpoint" in _locs(
        api.post("/evaluations", "alice", json=_evaluation({"backend": "openai", "endpoint": "mine"}))
    )
    assert api.get("/evaluations", "root").json()["total"] == before  # nothing was stored
    assert attacker.requests == []


def test_an_endpoint_redirecting_elsewhere_never_hands_over_the_key(api, listeners):
    """The operator's `bouncy` answers 307 to the user's listener: the worker does not follow, the job fails
    saying why, and the listener receives nothing (no key, no request at all)."""
    attacker, operator = listeners
    created = api.post("/evaluations", "alice", json=_evaluation({"backend": "openai", "endpoint": "bouncy"}))
    assert created.status_code == 201, created.text
    job_id = created.json()["id"]
    assert _run_queued_evaluations() == [job_id]
    detail = api.get(f"/evaluations/{job_id}", "alice")
    assert detail.json()["status"] == "failed"
    assert "redirects are not followed" in detail.json()["error"] and "'bouncy'" in detail.json()["error"]
    assert operator.requests and all(r["path"].startswith("/bounce/") for r in operator.requests)
    assert operator.requests[0]["headers"].get("Authorization") == f"Bearer {OPERATOR_SECRET}"  # its own host
    assert attacker.requests == []
    _no_secret(detail)
    assert operator.url not in detail.text and "OPERATOR_KEY" not in detail.text
    logs = api.get(f"/jobs/{job_id}/logs", "alice")
    _no_secret(logs)


def test_keyed_client_stays_on_its_host(listeners, monkeypatch):
    from training_platform.core.endpoints import Endpoint, OutboundRefused, keyed_client

    attacker, operator = listeners
    monkeypatch.setenv("OPERATOR_KEY", OPERATOR_SECRET)
    client = keyed_client(Endpoint("bouncy", f"{operator.url}/bounce/v1", "OPERATOR_KEY"), timeout=5)
    response = client.post("/chat/completions", json={})
    assert response.status_code == 307 and response.headers["location"].startswith(attacker.url)
    with pytest.raises(OutboundRefused, match="another host"):
        client.post(f"{attacker.url}/v1/chat/completions", json={})  # an absolute URL elsewhere
    with pytest.raises(OutboundRefused):
        client.get(response.headers["location"])
    client.close()
    assert attacker.requests == []


# ---------------------------------------------------------------------------------------------- real evaluation


def test_a_real_evaluation_sends_the_key_to_its_endpoint_only(api, listeners):
    attacker, operator = listeners
    created = api.post("/evaluations", "alice", json=_evaluation({"backend": "openai", "endpoint": "good"}))
    assert created.status_code == 201, created.text
    job_id = created.json()["id"]
    assert _run_queued_evaluations() == [job_id]
    detail = api.get(f"/evaluations/{job_id}", "alice")
    body = detail.json()
    assert body["status"] == "succeeded", body["error"]
    assert body["metrics"]["gsm8k/accuracy"]["n"] == 2
    assert body["config"]["model"]["endpoint"] == "good" and "base_url" not in body["config"]["model"]
    assert body["summary"]["model"] == {
        "backend": "openai",
        "model": "served-model",
        "endpoint": "good",
        "authenticated": True,
    }
    calls = operator.requests
    assert len(calls) >= 2 and {c["path"] for c in calls} == {"/v1/chat/completions"}  # (+ a retry on a busy box)
    assert {c["headers"].get("Authorization") for c in calls} == {f"Bearer {OPERATOR_SECRET}"}
    assert {json.loads(c["body"])["model"] for c in calls} == {"served-model"}
    assert not operator.saw(HF_SECRET) and not operator.saw(OPENAI_SECRET)
    assert attacker.requests == []
    _no_secret(detail)
    assert operator.url not in detail.text and "OPERATOR_KEY" not in detail.text
    with session_scope() as s:
        job = s.get(Job, job_id)
        evaluation = s.get(Evaluation, job_id)
        stored = json.dumps({"config": job.config, "summary": evaluation.summary, "error": job.error}, default=str)
    for secret in SECRETS:
        assert secret not in stored
    for path in (api.data_dir / "evals" / f"job-{job_id}").rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            assert not any(secret in text for secret in SECRETS), path


def test_admin_endpoints_are_resolved_by_the_worker_and_rechecked(api, listeners):
    attacker, operator = listeners
    created = api.post(
        "/endpoints", "root", json={"name": "team", "base_url": f"{operator.url}/v1", "api_key_env": "OPERATOR_KEY"}
    )
    assert created.status_code == 201, created.text
    first = api.post(
        "/evaluations", "alice", json=_evaluation({"backend": "openai", "endpoint": "team"}, model="any-model")
    )
    assert first.status_code == 201, first.text
    _run_queued_evaluations()
    assert api.get(f"/evaluations/{first.json()['id']}", "alice").json()["status"] == "succeeded"
    assert {c["headers"].get("Authorization") for c in operator.requests} == {f"Bearer {OPERATOR_SECRET}"}

    second = api.post(
        "/evaluations", "alice", json=_evaluation({"backend": "openai", "endpoint": "team"}, model="any-model")
    )
    assert second.status_code == 201
    assert api.delete("/endpoints/team", "root").status_code == 204  # removed before the worker got to it
    operator.requests.clear()
    _run_queued_evaluations()
    failed = api.get(f"/evaluations/{second.json()['id']}", "alice").json()
    assert failed["status"] == "failed" and "unknown endpoint 'team'" in failed["error"]
    assert operator.requests == [] and attacker.requests == []


# ---------------------------------------------------------------------------------------------- dataset scoring


def _validate_score(api, judge: dict, **kwargs):
    """validate_operation as alice (the paths in score params are checked for their reader)."""
    from training_platform.core.settings import get_settings
    from training_platform.db.models import User
    from training_platform.services import datasets as dataset_service
    from training_platform.services.access import reader_for

    with session_scope() as session:
        reader = reader_for(session, session.get(User, api.user_ids["alice"]))
        return dataset_service.validate_operation("score", {"judge": judge}, get_settings(), reader=reader, **kwargs)


def _score(api, judge: dict):
    """What POST /datasets/.../operations checks, then what the data worker runs (both in this process)."""
    from training_platform.core.settings import get_settings
    from training_platform.services import datasets as dataset_service

    settings = get_settings()
    params = _validate_score(api, judge, input_format="messages")
    source = api.data_dir / "endpoint-score-src.jsonl"
    source.write_text(
        "".join(
            json.dumps({"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]})
            + "\n"
            for i in range(3)
        )
    )
    workdir = api.data_dir / "endpoint-score-work"
    workdir.mkdir(exist_ok=True)
    return params, dataset_service.run_operation("score", params, source, workdir, settings)


def test_dataset_judge_names_an_endpoint_only(api, listeners):
    from training_platform.services import datasets as dataset_service

    attacker, operator = listeners

    def locs(judge: dict) -> dict[str, str]:
        with pytest.raises(dataset_service.OperationInvalid) as info:
            _validate_score(api, judge)
        return dict(info.value.errors)

    assert "params.judge.base_url" in locs({"endpoint": "good", "model": "served-model", "base_url": attacker.url})
    assert "params.judge.api_key_env" in locs({"endpoint": "good", "model": "served-model", "api_key_env": "HF_TOKEN"})
    assert "unknown endpoint 'mine'" in locs({"endpoint": "mine", "model": "m"})["params.judge.endpoint"]
    assert "not 'other'" in locs({"endpoint": "good", "model": "other"})["params.judge.model"]
    assert "params.judge.reward_path" in locs(
        {"endpoint": "bouncy", "model": "m", "mode": "reward", "reward_path": f"{attacker.url}/pooling"}
    )
    assert "params.judge.reward_path" in locs(
        {"endpoint": "bouncy", "model": "m", "mode": "reward", "reward_path": "//127.0.0.1/pooling"}
    )

    params, output = _score(api, {"endpoint": "good", "model": "served-model"})
    assert params["judge"]["endpoint"] == "good"
    judge = output.report["judge"]
    assert judge["endpoint"] == "good" and judge["authenticated"] is True and judge["errors"] == 0
    assert output.stats["scores"]["judge"] == pytest.approx(0.4)
    assert {r["headers"].get("Authorization") for r in operator.requests} == {f"Bearer {OPERATOR_SECRET}"}
    text = json.dumps(output.report)
    assert operator.url not in text and not any(secret in text for secret in SECRETS)
    assert attacker.requests == []

    operator.requests.clear()
    _, bounced = _score(api, {"endpoint": "bouncy", "model": "m", "max_retries": 0})
    assert bounced.report["judge"]["errors"] == 3
    assert "redirects are not followed" in bounced.report["judge"]["last_error"]
    assert attacker.requests == []
    assert all(r["path"].startswith("/bounce/") for r in operator.requests)


# ---------------------------------------------------------------------------------------------- schedules


def test_a_schedule_checks_its_endpoint_again_when_it_fires(api, listeners):
    attacker, operator = listeners
    assert (
        api.post(
            "/endpoints",
            "root",
            json={"name": "nightly-ep", "base_url": f"{operator.url}/v1", "api_key_env": "OPERATOR_KEY"},
        ).status_code
        == 201
    )
    schedule = api.post(
        "/schedules",
        "alice",
        json={
            "name": "nightly",
            "trigger": "cron",
            "cron": "0 3 * * *",
            "model": "served-model",
            "backend": {"backend": "openai", "endpoint": "nightly-ep"},
            "benchmarks": [GSM8K],
            "generation": {"max_new_tokens": 16},
        },
    )
    assert schedule.status_code == 201, schedule.text
    assert schedule.json()["request"]["backend"] == {"backend": "openai", "endpoint": "nightly-ep"}
    schedule_id = schedule.json()["id"]
    fired = api.post(f"/schedules/{schedule_id}/run", "alice")
    assert fired.status_code == 201, fired.text
    _run_queued_evaluations()
    assert api.get(f"/evaluations/{fired.json()['evaluation_id']}", "alice").json()["status"] == "succeeded"
    assert {r["headers"].get("Authorization") for r in operator.requests} == {f"Bearer {OPERATOR_SECRET}"}

    assert api.delete("/endpoints/nightly-ep", "root").status_code == 204
    refused = api.post(f"/schedules/{schedule_id}/run", "alice")
    assert refused.status_code == 409 and "unknown endpoint 'nightly-ep'" in refused.json()["detail"]
    _no_secret(refused)
    assert attacker.requests == []


def test_a_broken_operator_configuration_is_reported_not_used(api, listeners, monkeypatch):
    from training_platform.core.settings import get_settings

    attacker, _ = listeners
    monkeypatch.setenv("TP_ENDPOINTS", json.dumps({"x": {"base_url": "file:///etc/passwd", "api_key_env": "HF_TOKEN"}}))
    get_settings.cache_clear()
    try:
        users = api.get("/endpoints", "alice")
        assert users.status_code == 503 and "ask them to fix it" in users.json()["detail"]
        admins = api.get("/endpoints", "root")
        assert admins.status_code == 503 and "only http:// and https://" in admins.json()["detail"]
        locs = _locs(api.post("/evaluations", "alice", json=_evaluation({"backend": "openai", "endpoint": "x"})))
        assert "endpoint configuration is invalid" in locs["backend.endpoint"]
        local = api.post("/evaluations", "alice", json={**_evaluation({"num_threads": 1}, model="demo/model")})
        assert local.status_code == 201, local.text  # what names no endpoint is unaffected
        assert api.post(f"/jobs/{local.json()['id']}/cancel", "alice").status_code == 200  # not run here
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
    assert attacker.requests == []

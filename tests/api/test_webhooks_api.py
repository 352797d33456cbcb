"""POST/GET/DELETE /webhooks: the operator's host allowlist (TP_WEBHOOK_HOSTS), bounded inputs, the write-only secret,
owners; and the URL rules themselves."""

from __future__ import annotations

import json
import logging

import pytest
from api_helpers import database, running_api

from training_platform.core.settings import get_settings
from training_platform.services import jobs as job_service
from training_platform.services import webhooks

pytestmark = pytest.mark.integration

HOSTS = "hooks.example.test, 127.0.0.1:8123 ,[::1]:9000"
SECRET = "s3cret-never-shown-4711"


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def hook_api(request, data_dir, redis_client, tmp_path_factory):
    with (
        database(request.param, tmp_path_factory.mktemp(f"hooks_{request.param}")) as url,
        running_api(data_dir, url, TP_WEBHOOK_HOSTS=HOSTS) as api,
    ):
        yield api


def _create(api, user: str = "alice", **body):
    return api.post("/webhooks", user=user, json={"url": "https://hooks.example.test/tp", **body})


def test_crud_and_secret_never_returned(hook_api, caplog):
    caplog.set_level(logging.DEBUG, logger="training_platform")
    r = _create(hook_api, events=["job.failed", "job.failed", "job.succeeded"], secret=SECRET)
    assert r.status_code == 201, r.text
    created = r.json()
    assert created["events"] == ["job.failed", "job.succeeded"] and created["has_secret"] is True
    assert created["owner"] == "alice" and created["last_delivery"] is None
    assert SECRET not in r.text
    plain = _create(hook_api, url="http://127.0.0.1:8123/x?token=1").json()
    assert plain["has_secret"] is False and plain["events"] == list(webhooks.EVENTS)

    listed = hook_api.get("/webhooks").json()
    ids = [w["id"] for w in listed["items"]]
    assert created["id"] in ids and plain["id"] in ids and SECRET not in str(listed)
    assert created["id"] not in [w["id"] for w in hook_api.get("/webhooks", user="bob").json()["items"]]
    assert created["id"] in [w["id"] for w in hook_api.get("/webhooks", user="root").json()["items"]]

    assert hook_api.delete(f"/webhooks/{created['id']}", user="bob").status_code == 404
    assert hook_api.delete(f"/webhooks/{created['id']}").status_code == 204
    assert hook_api.delete(f"/webhooks/{created['id']}").status_code == 404
    assert hook_api.delete(f"/webhooks/{plain['id']}", user="root").status_code == 204
    assert SECRET not in caplog.text


@pytest.mark.parametrize(
    "url, says",
    [
        ("https://evil.example.com/x", "not one the operator allows"),
        ("https://hooks.example.test:8443/x", "not one the operator allows"),  # no port listed: 443 only
        ("http://127.0.0.1:8124/x", "not one the operator allows"),
        ("http://127.0.0.1/x", "not one the operator allows"),
        ("http://2130706433:8123/x", "not one the operator allows"),  # 127.0.0.1 spelled otherwise
        ("https://hooks.example.test.evil.com/x", "not one the operator allows"),
        ("https://user:pw@hooks.example.test/x", "user:password"),
        ("https://hooks.example.test@evil.com/x", "user:password"),
        ("ftp://hooks.example.test/x", "only http:// and https://"),
        ("file:///etc/passwd", "only http:// and https://"),
        ("https:///x", "no host"),
        ("https://hooks.example.test/x#frag", "fragment"),
        ("https://hooks.example.test/a b", "printable ASCII"),
        ("https://hooks.example.test\\@evil.com/", "backslash"),
        ("http://[::1]:99999/", "not a valid URL"),
    ],
)
def test_refused_urls_name_url(hook_api, url, says):
    r = _create(hook_api, url=url)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert detail[0]["loc"] == "url" and says in detail[0]["msg"], detail


def test_allowed_forms(hook_api):
    for url in ("https://HOOKS.example.test:443/x", "http://hooks.example.test/x", "http://[::1]:9000/h"):
        r = _create(hook_api, url=url, user="bob")
        assert r.status_code == 201, (url, r.text)
        assert hook_api.delete(f"/webhooks/{r.json()['id']}", user="bob").status_code == 204


def test_disabled_when_the_operator_allows_none(hook_api):
    settings = get_settings()
    old, settings.webhook_hosts = settings.webhook_hosts, ""
    try:
        r = _create(hook_api)
    finally:
        settings.webhook_hosts = old
    assert r.status_code == 422
    item = r.json()["detail"][0]
    assert item["loc"] == "url" and "operator allows no webhook hosts" in item["msg"]


def test_broken_operator_setting_is_503(hook_api):
    settings = get_settings()
    old, settings.webhook_hosts = settings.webhook_hosts, "https://hooks.example.test/path"
    try:
        plain, admin = _create(hook_api), _create(hook_api, user="root")
    finally:
        settings.webhook_hosts = old
    assert plain.status_code == 503 and "TP_WEBHOOK_HOSTS" not in plain.text
    assert admin.status_code == 503 and "TP_WEBHOOK_HOSTS" in admin.text


@pytest.mark.parametrize(
    "body, loc",
    [
        ({"events": []}, "events"),
        ({"events": ["job.started"]}, "events[0]"),
        ({"events": ["job.failed"] * 4}, "events"),
        ({"secret": "short"}, "secret"),
        ({"secret": "x" * 257}, "secret"),
        ({"url": "https://hooks.example.test/" + "a" * 2048}, "url"),
        ({"extra": 1}, "extra"),
    ],
)
def test_bounded_body(hook_api, body, loc):
    r = _create(hook_api, **body)
    assert r.status_code == 422, r.text
    assert any(item["loc"] == loc for item in r.json()["detail"]), r.json()


def test_at_most_ten_per_user(hook_api):
    created = []
    try:
        for i in range(webhooks.MAX_WEBHOOKS_PER_USER):
            r = _create(hook_api, user="root", url=f"https://hooks.example.test/{i}")
            assert r.status_code == 201, r.text
            created.append(r.json()["id"])
        r = _create(hook_api, user="root")
        assert r.status_code == 409 and "at most 10" in r.text
    finally:
        for webhook_id in created:
            hook_api.delete(f"/webhooks/{webhook_id}", user="root")


# ---------------------------------------------------------------------------------------------- the rules


def test_parse_hosts():
    assert webhooks.parse_hosts(" a.example:81, B.example ,,[::1]:9") == {
        ("a.example", 81),
        ("b.example", None),
        ("::1", 9),
    }
    assert webhooks.parse_hosts("") == frozenset()
    for bad in ("http://a.example", "a.example/path", "u@a.example", "a.example:0", "a.example:x", "a b"):
        with pytest.raises(webhooks.WebhookConfigError, match="TP_WEBHOOK_HOSTS"):
            webhooks.parse_hosts(bad)


def test_signature():
    body = b'{"event":"job.failed"}'
    assert webhooks.sign("k" * 8, body) == ("sha256=" + __import__("hmac").new(b"k" * 8, body, "sha256").hexdigest())


def test_post_does_not_follow_redirects_nor_leave_the_allowlist():
    import httpx

    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(302, headers={"Location": "http://evil.example/"})

    hosts = webhooks.parse_hosts("hooks.example.test")
    transport = httpx.MockTransport(handler)
    out = webhooks.post("https://hooks.example.test/x", b"{}", {}, hosts=hosts, transport=transport)
    assert out.status_code == 302 and "not followed" in out.error and not out.retry
    assert seen == ["https://hooks.example.test/x"]
    out = webhooks.post("https://evil.example/x", b"{}", {}, hosts=hosts, transport=transport)
    assert out.status_code is None and out.error.startswith("refused") and seen == ["https://hooks.example.test/x"]


def test_post_gives_up_on_a_trickling_receiver():
    import socket
    import threading
    import time

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    stop = threading.Event()

    def trickle():
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 100:
                if stop.is_set():
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return
                time.sleep(0.1)  # each read is quick: only a deadline on the whole attempt stops this

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    try:
        started = time.monotonic()
        out = webhooks.post(
            f"http://127.0.0.1:{port}/x", b"{}", {}, hosts=webhooks.parse_hosts(f"127.0.0.1:{port}"), timeout=0.5
        )
        assert time.monotonic() - started < 3
        assert out.status_code is None and out.retry and "no complete answer within 0.5 s" in out.error
    finally:
        stop.set()
        server.close()


def test_notification_only_when_the_transition_commits(hook_api, monkeypatch):
    from api_helpers import valid_config

    from training_platform.db import crud
    from training_platform.db.models import Job, JobStatus, User
    from training_platform.db.session import session_scope

    sent = []
    monkeypatch.setattr(webhooks._dispatcher, "submit", lambda items, bind=None: sent.extend(items))
    with session_scope() as s:
        job_id = crud.create_job(
            s, owner=s.get(User, hook_api.user_ids["alice"]), name="hooked", config=valid_config()
        ).id
    with pytest.raises(RuntimeError), session_scope() as s:
        job_service.transition(s, s.get(Job, job_id), JobStatus.failed, "test")
        raise RuntimeError("rolled back")
    assert sent == []
    with session_scope() as s:
        job = s.get(Job, job_id)
        job_service.transition(s, job, JobStatus.failed, "test")
        job.error = "boom (set after the transition, before the commit)"
    [item] = sent
    payload = json.loads(item.body)
    assert item.event == "job.failed" and item.job_id == job_id and item.owner_id == hook_api.user_ids["alice"]
    assert payload["job"]["error"] == "boom (set after the transition, before the commit)"
    assert payload["job"]["status"] == "failed" and payload["event"] == "job.failed"

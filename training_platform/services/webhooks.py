"""Job-end webhooks: a user's jobs (train, data, eval) reaching succeeded / failed / cancelled are POSTed to the
URLs the user registered (`/api/v1/webhooks`), only on hosts the operator allows.

Rules (the platform calls out only to hosts the operator named):
- `TP_WEBHOOK_HOSTS` is the allowlist: comma-separated `host` or `host:port` (`[v6addr]:port`); a host without a
  port allows the scheme's default port only (80 / 443). Empty: webhooks are disabled. Hosts are compared as
  written (lower-cased): no wildcards, no resolution. It is checked when a webhook is registered and again before
  every delivery (a host the operator removed since is not called).
- URLs are http:// or https://, at most 2048 printable ASCII characters, without user:password or fragment.
- Deliveries never follow redirects and never read the response body; each attempt has a 5 s timeout; a
  connection error, a timeout, a 5xx or a 429 is retried 3 times (after 1x, 4x, 16x `TP_WEBHOOK_BACKOFF`).
- With a secret, `X-TP-Signature: sha256=<hex HMAC-SHA256 of the body>`. The secret is write-only over the API and
  never logged; logs name a webhook by id and host only (a URL's path may itself be a secret).

How a job's end gets there: `services.jobs.transition()` (the one place every status change is recorded, with its job
event) calls `job_ended_on_commit()` for the end states. The payload is taken from the job when its session
commits (a rolled-back transition sends nothing); a background thread then looks up the owner's webhooks and sends
one Celery task per webhook to the `maintenance` queue (`workers/webhook_tasks.py`), where it is delivered. Neither
the job's transaction nor its worker ever waits for a receiver (nor for the broker).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import hmac
import json
import logging
import queue
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from training_platform.core.errors import InvalidInput

log = logging.getLogger("training_platform.services.webhooks")

EVENTS = ("job.succeeded", "job.failed", "job.cancelled")
EVENT_FOR_STATUS = {"succeeded": "job.succeeded", "failed": "job.failed", "cancelled": "job.cancelled"}
MAX_WEBHOOKS_PER_USER = 10
MAX_URL = 2048
MAX_SECRET = 256
MIN_SECRET = 8
TIMEOUT_S = 5.0
MAX_RETRIES = 3
RETRY_FACTORS = (1, 4, 16)
MAX_ERROR_TEXT = 2000
ALLOWED_SCHEMES = ("http", "https")
DEFAULT_PORTS = {"http": 80, "https": 443}
USER_AGENT = "training-platform-webhooks/1"


class WebhookError(InvalidInput):
    """A webhook definition the rules refuse; `field` is the request field it concerns."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__([(field or "", message)], message=message)
        self.field = field


class WebhookConfigError(WebhookError):
    """TP_WEBHOOK_HOSTS cannot be parsed: the operator's mistake, reported as such."""

    http_status = 500  # not the caller's input
    exit_code = 1


# ---------------------------------------------------------------------------------------------- the allowlist


Host = tuple[str, int | None]


def parse_hosts(text: str | None) -> frozenset[Host]:
    """{(host, port or None)} from TP_WEBHOOK_HOSTS; WebhookConfigError naming the bad entry."""
    out: set[Host] = set()
    for raw in (text or "").split(","):
        entry = raw.strip()
        if not entry:
            continue
        problem = None
        if len(entry) > 300 or any(ord(c) <= 32 or ord(c) >= 127 for c in entry) or any(c in entry for c in "/@?#\\"):
            problem = "printable ASCII host[:port], without scheme, path, user or query"
        else:
            try:
                parts = urlsplit(f"//{entry}")
                port = parts.port
                host = parts.hostname
            except ValueError as exc:
                problem, host, port = str(exc), None, None
            if problem is None and (not host or port == 0):
                problem = "not a host[:port]"
        if problem is not None:
            raise WebhookConfigError(f"TP_WEBHOOK_HOSTS: {entry[:100]!r}: {problem}")
        assert host is not None  # an empty host is a problem (raised above)
        out.add((host.lower(), port))
    return frozenset(out)


def allowed_hosts(settings: Any = None) -> frozenset[Host]:
    if settings is None:
        from training_platform.core.settings import get_settings

        settings = get_settings()
    return parse_hosts(getattr(settings, "webhook_hosts", ""))


def _url_origin(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), parts.port or DEFAULT_PORTS.get(scheme, 0)


def host_allowed(scheme: str, host: str, port: int, hosts: Iterable[Host]) -> bool:
    hosts = frozenset(hosts)
    return (host, port) in hosts or ((host, None) in hosts and port == DEFAULT_PORTS.get(scheme))


def shown_host(url: str) -> str:
    """What logs and messages say about a URL: host[:port] (the path may carry a token)."""
    try:
        scheme, host, port = _url_origin(url)
    except ValueError:
        return "<invalid url>"
    return host if port == DEFAULT_PORTS.get(scheme) else f"{host}:{port}"


def check_url(url: Any, hosts: frozenset[Host]) -> str:
    """The URL if the rules and the operator's allowlist accept it; WebhookError (field `url`) saying why not."""
    if not isinstance(url, str) or not url:
        raise WebhookError("give the URL to POST to, e.g. https://hooks.example.com/tp", "url")
    if len(url) > MAX_URL or any(ord(c) <= 32 or ord(c) >= 127 for c in url) or "\\" in url:
        raise WebhookError(f"at most {MAX_URL} printable ASCII characters, without spaces or backslashes", "url")
    try:
        parts = urlsplit(url)
        scheme, host, port = _url_origin(url)
    except ValueError as exc:
        raise WebhookError(f"not a valid URL ({exc})", "url") from None
    if scheme not in ALLOWED_SCHEMES:
        raise WebhookError(f"only http:// and https:// URLs are allowed, not {scheme or 'no'} scheme", "url")
    if not host:
        raise WebhookError("the URL has no host", "url")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise WebhookError("no user:password in the URL; use `secret` to let the receiver check the sender", "url")
    if parts.fragment or url.endswith("#"):
        raise WebhookError("no #fragment in the URL", "url")
    if not hosts:
        raise WebhookError(
            "the operator allows no webhook hosts (TP_WEBHOOK_HOSTS is empty): webhooks are disabled on this platform",
            "url",
        )
    if not host_allowed(scheme, host, port, hosts):
        raise WebhookError(
            f"host {shown_host(url)!r} is not one the operator allows for webhooks (TP_WEBHOOK_HOSTS)", "url"
        )
    return url


def check_events(events: Any) -> list[str]:
    if not isinstance(events, list | tuple) or not events:
        raise WebhookError(f"a non-empty list of {', '.join(EVENTS)}", "events")
    out: list[str] = []
    for i, event in enumerate(events):
        if event not in EVENTS:
            raise WebhookError(f"must be one of {', '.join(EVENTS)}", f"events[{i}]")
        if event not in out:
            out.append(event)
    return out


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


# ---------------------------------------------------------------------------------------------- payloads


def _iso(ts: datetime | None) -> str | None:
    if ts is None:
        return None
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=UTC)
    return ts.astimezone(UTC).isoformat(timespec="seconds")


def job_payload(job: Any, event: str, data_path: Any = None) -> dict[str, Any]:
    """What a receiver gets: the job's public fields (no config, no paths outside the data dir, error redacted)."""
    from pathlib import Path

    from training_platform.training.rundir import redact

    info: dict[str, Any] = {
        "id": job.id,
        "name": job.name,
        "kind": job.kind,
        "algorithm": job.algorithm,
        "status": job.status,
        "finished_at": _iso(job.finished_at),
    }
    if job.error:
        info["error"] = redact(str(job.error))[:MAX_ERROR_TEXT]
    if job.run_dir and data_path is not None:
        with contextlib.suppress(ValueError, OSError):
            info["run_dir"] = str(Path(job.run_dir).resolve().relative_to(Path(data_path)))
    return {"event": event, "job": info, "ts": _iso(datetime.now(UTC))}


@dataclass(frozen=True)
class JobEnded:
    owner_id: int
    job_id: int
    event_id: int | None
    event: str
    body: str  # the JSON body, serialised once: what is signed is what is sent


# ---------------------------------------------------------------------------------------------- the commit hook

_PENDING = "tp_webhooks_pending"
_READY = "tp_webhooks_ready"
_hooks_installed = False
_hooks_lock = threading.Lock()


def job_ended_on_commit(session: Any, job: Any, event_row: Any) -> None:
    """Called by services.jobs.transition() for an end state: notify the owner's webhooks once the session commits."""
    _install_session_hooks()
    session.info.setdefault(_PENDING, []).append((job, event_row))


def _before_commit(session: Any) -> None:
    # Snapshot now: the job's final fields (an error set after the transition included) are all in memory, and SQL
    # may still be emitted. Never raise: a notification must not fail the job's commit.
    pending = session.info.pop(_PENDING, None)
    if not pending:
        return
    try:
        from training_platform.core.settings import get_settings

        data_path = get_settings().data_path
    except Exception:  # noqa: BLE001
        data_path = None
    ready = session.info.setdefault(_READY, [])
    for job, event_row in pending:
        try:
            event = EVENT_FOR_STATUS.get(str(event_row.to_status))
            if event is None:
                continue
            body = json.dumps(job_payload(job, event, data_path), separators=(",", ":"), sort_keys=True)
            ready.append(JobEnded(owner_id=job.owner_id, job_id=job.id, event_id=event_row.id, event=event, body=body))
        except Exception:  # noqa: BLE001
            log.exception("job %s: could not prepare its webhook notification", getattr(job, "id", "?"))


def _after_commit(session: Any) -> None:
    ready = session.info.pop(_READY, None)
    session.info.pop(_PENDING, None)
    if ready:
        from sqlalchemy.engine import Engine

        try:
            bind = session.get_bind()  # the database the job lives in, whatever the settings say by then
        except Exception:  # noqa: BLE001
            bind = None
        if not isinstance(bind, Engine):  # a connection is not to be used from another thread
            bind = None
        _dispatcher.submit(ready, bind)


def _after_rollback(session: Any) -> None:
    session.info.pop(_PENDING, None)
    session.info.pop(_READY, None)


def _install_session_hooks() -> None:
    global _hooks_installed
    if _hooks_installed:
        return
    with _hooks_lock:
        if not _hooks_installed:
            from sqlalchemy import event
            from sqlalchemy.orm import Session

            event.listen(Session, "before_commit", _before_commit)
            event.listen(Session, "after_commit", _after_commit)
            event.listen(Session, "after_rollback", _after_rollback)
            _hooks_installed = True


# ---------------------------------------------------------------------------------------------- dispatch


def _session(bind: Any = None):
    from contextlib import contextmanager

    from sqlmodel import Session

    from training_platform.db.session import session_scope

    if bind is None:
        return session_scope()

    @contextmanager
    def scope():
        with Session(bind, expire_on_commit=False) as session:
            try:
                yield session
                session.commit()
            except BaseException:
                session.rollback()
                raise

    return scope()


def dispatch(ended: Iterable[JobEnded], bind: Any = None) -> int:
    """Send one delivery task per (ended job, subscribed webhook of its owner), looked up through `bind` (default:
    the platform's database). Returns the tasks sent. A broker that cannot be reached is logged and recorded on the
    webhook (`last_error`), never raised."""
    from sqlmodel import select

    from training_platform.core.timeutil import utcnow
    from training_platform.db.models import Webhook

    session_scope = functools.partial(_session, bind)
    sent = 0
    for item in ended:
        with session_scope() as session:
            hooks = [
                (w.id, w.url)
                for w in session.exec(select(Webhook).where(Webhook.owner_id == item.owner_id)).all()
                if item.event in (w.events or [])
            ]
        for webhook_id, url in hooks:
            try:
                from training_platform.taskqueue.app import WEBHOOK_TASK, app

                app.send_task(
                    WEBHOOK_TASK,
                    args=[webhook_id, item.job_id, item.event, item.event_id, item.body],
                    queue="maintenance",
                )
                sent += 1
            except Exception as exc:  # noqa: BLE001 - the job is done either way; say loudly what was lost
                reason = f"not delivered: the broker could not be reached ({type(exc).__name__})"
                log.error("webhook %s (%s): job %s %s %s", webhook_id, shown_host(url), item.job_id, item.event, reason)
                try:
                    with session_scope() as session:
                        row = session.get(Webhook, webhook_id)
                        if row is not None:
                            row.last_delivery_at, row.last_event, row.last_job_id = utcnow(), item.event, item.job_id
                            row.last_status_code, row.last_error, row.last_attempts = None, reason, 0
                            session.add(row)
                except Exception:  # noqa: BLE001
                    log.exception("webhook %s: could not record the lost delivery", webhook_id)
    return sent


class _Dispatcher:
    """One daemon thread sending the delivery tasks, so no commit waits for the database lookup or the broker."""

    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[list[JobEnded], Any]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._pid: int | None = None

    def submit(self, items: list[JobEnded], bind: Any = None) -> None:
        import os

        with self._lock:
            if self._thread is None or not self._thread.is_alive() or self._pid != os.getpid():
                self._queue = queue.Queue()  # after a fork the parent's queue and thread are not ours
                self._pid = os.getpid()
                self._thread = threading.Thread(target=self._run, args=(self._queue,), name="tp-webhooks", daemon=True)
                self._thread.start()
            self._queue.put((items, bind))

    def _run(self, q: queue.Queue) -> None:
        while True:
            items, bind = q.get()
            try:
                dispatch(items, bind)
            except Exception:  # noqa: BLE001
                log.exception("webhook notifications for job(s) %s were lost", [i.job_id for i in items])
            finally:
                q.task_done()

    def flush(self, timeout: float = 3.0) -> bool:
        """Wait (bounded) until what was submitted has been sent. True when nothing is left."""
        import time

        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.02)
        return not self._queue.unfinished_tasks


_dispatcher = _Dispatcher()
atexit.register(_dispatcher.flush)


def flush(timeout: float = 3.0) -> bool:
    return _dispatcher.flush(timeout)


# ---------------------------------------------------------------------------------------------- delivery


@dataclass(frozen=True)
class Outcome:
    status_code: int | None
    error: str | None
    retry: bool

    @property
    def ok(self) -> bool:
        return self.error is None


def post(
    url: str,
    body: bytes,
    headers: dict[str, str],
    *,
    hosts: frozenset[Host],
    timeout: float = TIMEOUT_S,
    transport: Any = None,
) -> Outcome:
    """One attempt: POST `body` to `url` (checked again against `hosts`, with httpx's own reading of the URL).
    Redirects are not followed and the response body is not read."""
    import httpx

    try:
        check_url(url, hosts)
        target = httpx.URL(url)
        scheme, host = target.scheme, (target.host or "").lower()
        port = target.port or DEFAULT_PORTS.get(scheme, 0)
        if not host_allowed(scheme, host, port, hosts):
            raise WebhookError("host not allowed", "url")
    except (WebhookError, httpx.InvalidURL) as exc:
        return Outcome(None, f"refused: {exc}"[:MAX_ERROR_TEXT], retry=False)
    client = httpx.Client(timeout=timeout, follow_redirects=False, transport=transport)
    result: list[Any] = []

    def attempt() -> None:
        try:
            with client.stream("POST", target, content=body, headers=headers) as response:
                result.append(response.status_code)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            result.append(exc)

    # httpx's timeout bounds each network operation; the thread bounds the whole attempt (a receiver trickling its
    # answer byte by byte): past the deadline the connection is closed under it and the attempt counts as failed.
    thread = threading.Thread(target=attempt, name="tp-webhook-post", daemon=True)
    thread.start()
    thread.join(timeout)
    finished = not thread.is_alive() and bool(result)
    with contextlib.suppress(Exception):
        client.close()
    if not finished:
        thread.join(1.0)
        return Outcome(None, f"no complete answer within {timeout:g} s", retry=True)
    code = result[0]
    if isinstance(code, httpx.TimeoutException):
        return Outcome(None, f"timed out after {timeout:g} s", retry=True)
    if isinstance(code, httpx.HTTPError):
        first = str(code).splitlines()[0] if str(code) else ""
        return Outcome(None, f"{type(code).__name__}: {first}"[:MAX_ERROR_TEXT], retry=True)
    if isinstance(code, BaseException):
        return Outcome(None, f"{type(code).__name__}: {code}"[:MAX_ERROR_TEXT], retry=True)
    if 200 <= code < 300:
        return Outcome(code, None, retry=False)
    if 300 <= code < 400:
        return Outcome(code, f"HTTP {code}: redirects are not followed", retry=False)
    return Outcome(code, f"HTTP {code}", retry=code >= 500 or code == 429)


def deliver(
    webhook_id: int,
    job_id: int,
    event: str,
    event_id: int | None,
    body: str,
    *,
    attempt: int = 1,
    final: bool = True,
    transport: Any = None,
) -> Outcome | None:
    """One delivery attempt of `body` to webhook `webhook_id`, its outcome recorded on the row. None when the webhook
    was deleted meanwhile. `final`: no retry will follow (the recorded error says so)."""
    from training_platform.core.timeutil import utcnow
    from training_platform.db.models import Webhook
    from training_platform.db.session import session_scope

    with session_scope() as session:
        row = session.get(Webhook, webhook_id)
        if row is None:
            log.info("webhook %s was deleted: job %s %s not delivered", webhook_id, job_id, event)
            return None
        url, secret = row.url, row.secret
    data = body.encode("utf-8")
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "X-TP-Event": event,
        "X-TP-Delivery": f"{event_id or 0}-{webhook_id}",
        "X-TP-Delivery-Attempt": str(attempt),
    }
    if secret:
        headers["X-TP-Signature"] = sign(secret, data)
    try:
        hosts = allowed_hosts()
    except WebhookConfigError as exc:
        outcome = Outcome(None, f"not delivered: {exc}", retry=False)
    else:
        outcome = post(url, data, headers, hosts=hosts, transport=transport)
    error = outcome.error
    if error is not None and outcome.retry and not final:
        error += " (will retry)"
    elif error is not None and outcome.retry:
        error += f" (gave up after {attempt} attempts)"
    with session_scope() as session:
        row = session.get(Webhook, webhook_id)
        if row is not None:
            row.last_delivery_at, row.last_event, row.last_job_id = utcnow(), event, job_id
            row.last_status_code, row.last_error, row.last_attempts = outcome.status_code, error, attempt
            session.add(row)
    level = logging.INFO if outcome.ok else logging.WARNING
    log.log(
        level,
        "webhook %s (%s): job %s %s attempt %d: %s",
        webhook_id,
        shown_host(url),
        job_id,
        event,
        attempt,
        f"HTTP {outcome.status_code}" if outcome.ok else error,
    )
    return outcome

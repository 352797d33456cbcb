"""Loaded for every test: the proof audit (an embedded Redis when none listens, the skip summary by cause, CI's
rule that a feature's proof may not be skipped; see tests/proof_audit.py), and how `make test` splits the suite
between its pytest-xdist workers (`-n 2 --dist loadgroup --no-loadscope-reorder`):

- a test file is one unit of work (its module fixtures are built once), except that every file using one of the
  costly session fixtures below joins that fixture's group, so the fixture is built once in the whole run;
- units start longest first (LONGEST_FIRST: measured with --durations), so the last to finish is a short one;
- each worker gets its own Redis databases (the suites' fixed db numbers, shifted per worker).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = ["proof_audit"]

TESTS = Path(__file__).resolve().parent

# session fixture -> (the directory whose conftest defines it, the group of every file that uses it)
SHARED_SESSION_FIXTURES = {
    "sft_start": ("training", "sft_start"),  # 150 steps of TRL SFT: the start of every verl RL run
    "platform": ("e2e", "tp_up"),  # one `tp up` the end-to-end and browser tests share
}

# Units that take minutes, longest first (the rest keep collection order after them).
LONGEST_FIRST = [
    "sft_start",
    "tp_up",
    "tests/test_benches.py",
    "tests/e2e/test_ray_http.py",
    "tests/training/test_ray.py",
    "tests/training/test_verl_engine.py",
    "tests/e2e/test_evaluation_http.py",
    "tests/workers/test_kill9.py",
]

# The Redis databases the suites use (their *_REDIS_URL defaults); worker N uses db - 6 * N.
REDIS_URL_ENV = {
    "TP_TEST_API_REDIS_URL": 15,
    "TP_TEST_REDIS_URL": 14,
    "TP_BENCH_REDIS_URL": 13,
    "TP_TEST_DATASETS_REDIS_URL": 12,
    "TP_TEST_POOLING_REDIS_URL": 11,
    "TP_TEST_INFERENCE_REDIS_URL": 10,
}
REDIS_DBS_PER_WORKER = len(REDIS_URL_ENV)


def pytest_configure(config: pytest.Config) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw") or not worker[2:].isdigit():
        return
    shift = REDIS_DBS_PER_WORKER * int(worker[2:])
    if shift + REDIS_DBS_PER_WORKER > 16:
        raise pytest.UsageError(f"Redis has 16 databases: at most {16 // REDIS_DBS_PER_WORKER} xdist workers")
    for name, db in REDIS_URL_ENV.items():
        os.environ.setdefault(name, f"redis://127.0.0.1:6379/{db - shift}")


def _unit(item: pytest.Item, file_groups: dict[Path, str]) -> str:
    return file_groups.get(item.path) or item.path.relative_to(TESTS.parent).as_posix()


@pytest.hookimpl(tryfirst=True)  # before xdist appends the group to each node id
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    file_groups: dict[Path, str] = {}
    for item in items:
        for fixture, (directory, group) in SHARED_SESSION_FIXTURES.items():
            if fixture in getattr(item, "fixturenames", ()) and item.path.is_relative_to(TESTS / directory):
                file_groups[item.path] = group
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(_unit(item, file_groups)))

    def rank(item: pytest.Item) -> int:
        unit = _unit(item, file_groups)
        return LONGEST_FIRST.index(unit) if unit in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: each file's tests keep their order

"""Loaded for every test: the proof audit (an embedded Redis when none listens, the skip summary by cause, CI's
rule that a feature's proof may not be skipped; see tests/proof_audit.py), and how `make test` splits the suite
between its pytest-xdist workers (`-n 2 --no-loadscope-reorder`):

- a test file is one unit of work, so its module fixtures are built once; tests/e2e is one unit, so the `tp up`
  they share (its session fixture `platform`) starts once. Every other costly fixture is used by one file only
  (the trained SFT start of verl RL: tests/training/test_verl_rl.py), or is module-scoped;
- units start longest first (LONGEST_FIRST: measured with --durations), so the last to finish is a short one;
- each worker runs on its own share of the CPU cores (its processes inherit the affinity): torch sizes its thread
  pool from the cores it may use, and two workers' training processes each running 2 threads on 2 cores made
  every step ~3x slower (80 SFT steps of the demo model: 12 s each side by side, 3.8 s pinned, 2.9 s alone);
- each worker gets its own Redis databases (the suites' fixed db numbers, shifted per worker), its own range of
  sandbox uids and its own temp dir (TMPDIR: the sandbox tests look for leftover processes by uid and leftover
  `tp-sandbox-*` dirs; Ray keeps its sessions and its "current cluster" there).

xdist's own `--dist loadgroup` marks cannot group here: it renames node ids, which pytest 9 no longer allows.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

pytest_plugins = ["proof_audit", "ray_fixtures"]  # ray_fixtures: the session's 2-node Ray cluster

TESTS = Path(__file__).resolve().parent
SHARED_UNITS = ("tests/e2e",)  # directories run as one unit (a session fixture all their files share)
OWN_UNITS = ("tests/e2e/test_sharing_http.py",)  # ... but for these files, which start their own `tp up`

# Units that take minutes, longest first (the rest keep collection order after them): from `--durations` of a
# full run, so that the run does not end on one worker with a long unit while the other idles.
LONGEST_FIRST = [
    "tests/e2e",
    "tests/training/test_verl_rl.py",
    "tests/training/test_verl_agent_rl.py",
    "tests/e2e/test_sharing_http.py",
    "tests/test_benches.py",
    "tests/training/test_ray.py",
    "tests/training/test_distributed.py",
    "tests/workers/test_worker_recovery.py",
    "tests/workers/test_up_kill.py",
    "tests/workers/test_platform_cli.py",
    "tests/workers/test_worker_jobs.py",
    "tests/workers/test_worker_scheduling.py",
    "tests/api/test_schemathesis.py",
    "tests/training/test_training.py",
    "tests/training/test_verl.py",
    "tests/workers/test_eval_recovery.py",
    "tests/training/test_verl_engine.py",
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


def work_unit(nodeid: str) -> str:
    """`tests/api/test_jobs_api.py::test_x[sqlite]` -> `tests/api/test_jobs_api.py`; every e2e test -> `tests/e2e`."""
    path = nodeid.split("::", 1)[0]
    if path in OWN_UNITS:
        return path
    return next((unit for unit in SHARED_UNITS if path.startswith(unit + "/")), path)


def pytest_configure(config: pytest.Config) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw") or not worker[2:].isdigit():
        return
    index, count = int(worker[2:]), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    cores = sorted(os.sched_getaffinity(0))
    if 1 < count <= len(cores):
        os.sched_setaffinity(0, cores[index % count :: count])
    shift = REDIS_DBS_PER_WORKER * index
    if shift + REDIS_DBS_PER_WORKER > 16:
        raise pytest.UsageError(f"Redis has 16 databases: at most {16 // REDIS_DBS_PER_WORKER} xdist workers")
    for name, db in REDIS_URL_ENV.items():
        os.environ.setdefault(name, f"redis://127.0.0.1:6379/{db - shift}")
    from training_platform.evaluation import sandbox

    base = int(os.environ.get(sandbox.ENV_UID_BASE, sandbox._DEFAULT_UID_BASE))
    os.environ[sandbox.ENV_UID_BASE] = str(base + sandbox._UID_SLOTS * index)
    tmp = Path(tempfile.gettempdir()) / f"tp-{worker}"  # short: Ray's socket paths live under it
    tmp.mkdir(exist_ok=True)
    tmp.chmod(0o1777)  # like /tmp: the sandbox's unprivileged uid traverses it
    os.environ["TMPDIR"] = str(tmp)
    tempfile.tempdir = None  # tempfile caches the directory it found first


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        unit = work_unit(item.nodeid)
        return LONGEST_FIRST.index(unit) if unit in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: each file's tests keep their order


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """Whole units to a worker, one at a time as workers free up, in collection order (longest first)."""
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return UnitScheduling(config, log)

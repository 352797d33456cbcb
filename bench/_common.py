"""Helpers shared by the bench scripts: the offline environment, running `tp` as a subprocess, timing, JSON output.

The benches drive `tp` through subprocesses on purpose: that is the path users take, and it keeps every measured
run in a fresh interpreter (no warm caches or leftover threads from an earlier run in the same process).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
CONFIGS = REPO_ROOT / "configs" / "examples"
RESULTS_DIR = REPO_ROOT / "bench" / "results"

# `--smoke` (every bench has it; tests/test_benches.py runs each one): tiny sizes, the report into this directory
# (default: a fresh temp dir), never into bench/results/.
SMOKE_DIR_ENV = "TP_BENCH_SMOKE_DIR"
# A TP_DATA_DIR where `tp demo prepare` already ran (tests/test_benches.py prepares one for all the smoke runs).
DEMO_CACHE_ENV = "TP_BENCH_DEMO_CACHE"
SMOKE_HELP = "tiny sizes, to check that the bench still runs (report to a temp dir, never bench/results/)"


def smoke_report(name: str, explicit: Path | None = None) -> Path:
    """Where a `--smoke` run writes its report: `explicit` (the bench's own output flag, when given), else
    `$TP_BENCH_SMOKE_DIR/<name>.json`, else a fresh temp dir. Never bench/results/: the committed results are
    measurements, a smoke run's numbers are not."""
    if explicit is None:
        base = os.environ.get(SMOKE_DIR_ENV) or tempfile.mkdtemp(prefix="tp_bench_smoke_")
        explicit = Path(base) / f"{name}.json"
    path = Path(explicit).resolve()
    if path.is_relative_to(RESULTS_DIR.resolve()):
        raise SystemExit(f"--smoke writes no report into {RESULTS_DIR}: got {path}")
    return path


def bench_env(data_dir: str | Path, **extra: str) -> dict[str, str]:
    """The environment of every subprocess: offline, TP_DATA_DIR set, identical for all runs that get compared."""
    env = dict(os.environ)
    env.update(
        {
            "TP_DATA_DIR": str(Path(data_dir).resolve()),
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra)
    return env


def tp_command() -> list[str]:
    """`tp` of the interpreter running the bench (the venv's console script), else `python -m training_platform.cli`."""
    script = Path(sys.executable).parent / "tp"
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "training_platform.cli"]


def run_measured(cmd: list[str], env: dict[str, str], log_path: Path, *, cwd: Path = REPO_ROOT) -> dict[str, Any]:
    """Run `cmd`, stdout+stderr to `log_path`. Returns exit code, wall-clock seconds of the whole process, its CPU
    seconds (user+sys, children included) and the 1-minute load average before it started.

    CPU seconds are much less sensitive than wall time to other jobs sharing the machine (they mostly add waiting,
    not work), so they are the better overhead signal on a busy box; the load average says how busy it was.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    with log_path.open("w", encoding="utf-8") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run(cmd, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, check=False)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "exit_code": proc.returncode,
        "wall_seconds": round(wall, 3),
        "cpu_seconds": round(cpu, 3),
        "load_avg_1m_before": None if load is None else round(load, 2),
    }


def run_logged(cmd: list[str], env: dict[str, str], log_path: Path, *, cwd: Path = REPO_ROOT) -> tuple[int, float]:
    """Run `cmd`, stdout+stderr to `log_path`; returns (exit code, wall-clock seconds of the whole process)."""
    result = run_measured(cmd, env, log_path, cwd=cwd)
    return result["exit_code"], result["wall_seconds"]


def train_stage(
    name: str,
    cmd: list[str],
    out_dir: Path,
    env: dict[str, str],
    log_dir: Path,
    curve_keys: tuple[str, ...],
    *,
    rows_with: str | None = None,
    **recorded: Any,
) -> dict[str, Any]:
    """One `tp train` subprocess (`cmd`, logged to `<log_dir>/<name>.log`): its exit code and wall time, then, when it
    wrote `final/`, its steps, train_runtime, model and metric curve; else `error` with the log's tail. `recorded`
    (the command's config or overrides) goes into the stage as is."""
    print(f"[{name}] {' '.join(cmd)}", flush=True)
    log = log_dir / f"{name}.log"
    rc, wall = run_logged(cmd, env, log)
    stage: dict[str, Any] = {
        "stage": name,
        "command": cmd,
        **recorded,
        "exit_code": rc,
        "wall_seconds": round(wall, 2),
        "log": str(log),
    }
    if rc != 0 or not (out_dir / "final").is_dir():
        stage["error"] = f"tp train exited {rc}:\n{tail(log)}"
        return stage
    info = read_run_info(out_dir)
    stage["steps"] = info.get("step")
    stage["train_runtime"] = info.get("summary", {}).get("train_runtime")
    stage["model"] = str(out_dir / "final")
    stage["curve"] = curve_summary(out_dir / "metrics.jsonl", curve_keys, rows_with=rows_with)
    return stage


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def seed_demo(data_dir: str | Path) -> None:
    """Under $TP_BENCH_DEMO_CACHE, copy that data dir's demo/ into `data_dir` first (a few MB): `tp demo prepare`
    then keeps the complete parts instead of building them again (~7 s per bench on 2 cores)."""
    cache = os.environ.get(DEMO_CACHE_ENV)
    target = Path(data_dir) / "demo"
    if cache and (Path(cache) / "demo").is_dir() and not target.exists():
        shutil.copytree(Path(cache) / "demo", target)


def prepare_demo(data_dir: Path, log_dir: Path) -> float:
    """`tp demo prepare` into `data_dir` (seeded from $TP_BENCH_DEMO_CACHE when set); returns its wall seconds.
    Raises RuntimeError when it fails."""
    seed_demo(data_dir)
    rc, wall = run_logged([*tp_command(), "demo", "prepare"], bench_env(data_dir), log_dir / "demo_prepare.log")
    if rc != 0:
        raise RuntimeError(f"tp demo prepare failed (exit {rc}):\n{tail(log_dir / 'demo_prepare.log')}")
    return wall


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def read_run_info(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "run.json").read_text(encoding="utf-8"))


def fresh_dir(path: Path) -> Path:
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def median(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def machine_info() -> dict[str, Any]:
    """What the numbers were measured on (timings are meaningless without it)."""
    info: dict[str, Any] = {
        "date": _dt.date.today().isoformat(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }
    with contextlib.suppress(OSError):
        info["load_avg_1_5_15"] = [round(x, 2) for x in os.getloadavg()]
    for module in ("torch", "transformers", "trl", "datasets"):
        try:
            info[module] = __import__(module).__version__
        except Exception:  # noqa: BLE001 - a missing library is reported, not fatal
            info[module] = None
    return info


def write_json(path: Path, data: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return path


def curve_summary(metrics_file: Path, keys: tuple[str, ...], *, rows_with: str | None = None) -> dict[str, Any]:
    """Mean of the first and last fifth of each logged metric in `keys` (rows holding `rows_with` only, if given):
    did training move?"""
    records = read_jsonl(metrics_file) if metrics_file.is_file() else []
    if rows_with is not None:
        records = [r for r in records if rows_with in r]
    out: dict[str, Any] = {}
    for key in keys:
        values = [r[key] for r in records if isinstance(r.get(key), int | float)]
        if values:
            n = max(1, len(values) // 5)
            out[key] = {"first": round(sum(values[:n]) / n, 4), "last": round(sum(values[-n:]) / n, 4)}
    return out


def finish_stages_report(args: Any, run: Any, print_report: Any) -> int:
    """The end of a staged learning bench (`run(args) -> (report, ok)`): print and write the report, say which stage
    failed (its logs kept), remove the temp data dir when all went well and none was asked for. The exit code."""
    try:
        report, ok = run(args)
    except RuntimeError as exc:  # tp demo prepare failed
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    print_report(report)
    report["ok"] = ok
    print(f"\nreport: {write_json(args.report, report)}")
    data_dir = Path(report["data_dir"])
    if not ok:
        print(f"a stage failed; logs kept in {data_dir / 'bench-logs'}", file=sys.stderr)
        for s in report["stages"]:
            if "error" in s:
                print(s["error"], file=sys.stderr)
    elif not args.keep and not args.data_dir:
        shutil.rmtree(data_dir, ignore_errors=True)
    return 0 if ok else 1


def fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows, strict=True)]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    print(line.format(*headers))
    print(line.format(*("-" * w for w in widths)))
    for row in rows:
        print(line.format(*row))

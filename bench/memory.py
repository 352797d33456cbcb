"""How close is the preflight's memory estimate (training/memory.py) to the real peak? The demo model
(0.66M parameters) and a ~50M-parameter Qwen2 built the same way, SFT and DPO, each compared as measured peak /
the estimate printed by `tp train --dry-run`. The estimate is per device (per process). The issue's bar is +-30%.

On CPU (`--device cpu`, the default): one process and two (torchrun), fp32; the measurement is `ru_maxrss` of the
largest process `tp train` started (for one process, the process itself; for torchrun, a rank).

On a GPU (`--device cuda`): one process, bf16 and fp32. Each case is a fresh interpreter that calls the same
functions `tp train` and `tp train --dry-run` call (training.runner.train and dry_run, unchanged) and then reads
the caching allocator's counters, torch.cuda.max_memory_allocated and max_memory_reserved. Neither counts the CUDA
context (the estimate's `runtime` part is meant to cover it), so each case also records the context's size: the
device's used memory (NVML) just before and after this process created its context. NVML's figure is device-wide:
it is only valid with `--jobs 1` and nothing else on the GPU (the allocator counters are per process: any `--jobs`).

    .venv/bin/python bench/memory.py                  # 2 models x SFT, DPO x 1, 2 processes, 20 steps each
    .venv/bin/python bench/memory.py --smoke          # the demo model, SFT, 1 process, 2 steps
    python bench/memory.py --device cuda --steps 10   # 2 models x SFT, DPO x bf16, fp32 -> results/memory_cuda.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402 - the bench dir is not a package
    CONFIGS,
    RESULTS_DIR,
    SMOKE_HELP,
    bench_env,
    fmt,
    machine_info,
    prepare_demo,
    print_table,
    smoke_report,
    tail,
    tp_command,
    write_json,
)

GIB = 1024**3
# ~50M parameters: 11 blocks of hidden 640 (embeddings tied, the demo tokenizer's 512-token vocabulary).
M50 = {"hidden_size": 640, "num_layers": 11, "num_heads": 10, "num_kv_heads": 5, "intermediate_size": 1728}


def build_m50(data_dir: Path) -> Path:
    """A ~50M-parameter model with the demo's tokenizer (random weights: memory does not care what they hold)."""
    from training_platform.demo.arithmetic import dataset_texts
    from training_platform.demo.tiny_model import create_tiny_model

    out = data_dir / "models" / "m50"
    if not (out / "config.json").is_file():
        create_tiny_model(out, extra_corpus=list(dataset_texts(data_dir / "demo" / "data")), **M50)
    return out


def overrides(model: Path, processes: int, steps: int, *, device: str = "cpu", dtype: str = "fp32") -> list[str]:
    sets = [
        f"model.path={model}",
        f"model.dtype={dtype}",
        f"resources.device={device}",
        f"resources.num_devices={processes}",
        f"training.max_steps={steps}",
        f"training.save_steps={steps}",
        "training.logging_steps=1",
        "training.eval_steps=null",
        "data.eval_file=null",
    ]
    return [arg for s in sets for arg in ("--set", s)]


def estimate_gib(config: Path, sets: list[str], env: dict[str, str]) -> float:
    proc = subprocess.run(
        [*tp_command(), "train", str(config), "--dry-run", *sets], env=env, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"dry run failed:\n{proc.stderr[-2000:]}")
    text = proc.stdout.split("# memory estimate (peak per device)\n", 1)[1].split("\n#", 1)[0]
    return float(yaml.safe_load(text)["memory"]["total_gib"])


def measured_peak_gib(config: Path, sets: list[str], env: dict[str, str], log: Path) -> float:
    """ru_maxrss of the largest process the run started (Linux: KiB). A fresh `python -c` parent keeps this
    bench's own memory out of RUSAGE_CHILDREN."""
    runner = (
        "import resource, subprocess, sys; "
        "rc = subprocess.run(sys.argv[1:]).returncode; "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(rc)"
    )
    with log.open("w") as out:
        proc = subprocess.run(
            [sys.executable, "-c", runner, *tp_command(), "train", str(config), "--output", str(log.parent / "run"),
             *sets],
            env=env, stdout=subprocess.PIPE, stderr=out, text=True, check=False,
        )  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"training failed ({log}):\n{tail(log)}")
    return int(proc.stdout.strip().splitlines()[-1]) * 1024 / GIB


# One CUDA case, in a fresh interpreter: argv = config, run dir, then the `--set` values. The estimate comes from
# runner.dry_run (what `tp train --dry-run` prints), the run from runner.train (what `tp train` runs); the last
# stdout line is a JSON object.
CUDA_RUNNER = r"""
import json, sys
config, output, *sets = sys.argv[1:]
GIB = 1024**3

def nvml_used():
    try:
        import pynvml
        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).used
    except Exception:
        return None

before = nvml_used()  # no CUDA context in this process yet
import torch
torch.zeros(1, device="cuda")  # the context, and one small allocator segment
after = nvml_used()
context = None if before is None or after is None else (after - before - torch.cuda.memory_reserved()) / GIB
from training_platform.training.config import load_yaml
from training_platform.training.runner import dry_run, train
import yaml
plan = dry_run(load_yaml(config) or {}, overrides=sets)
text = plan.split("# memory estimate (peak per device)\n", 1)[1].split("\n#", 1)[0]
estimate = yaml.safe_load(text)["memory"]
torch.cuda.synchronize()
torch.cuda.reset_peak_memory_stats()
result = train(load_yaml(config) or {}, overrides=sets, output=output)
torch.cuda.synchronize()
print(json.dumps({
    "status": result.status, "step": result.step, "estimate": estimate,
    "max_allocated_gib": torch.cuda.max_memory_allocated() / GIB,
    "max_reserved_gib": torch.cuda.max_memory_reserved() / GIB,
    "cuda_context_gib": context, "device_name": torch.cuda.get_device_name(0),
}))
"""


def cuda_case(config: Path, sets: list[str], env: dict[str, str], log: Path) -> dict[str, Any]:
    values = [s for s in sets if s != "--set"]
    with log.open("w") as err:
        proc = subprocess.run(
            [sys.executable, "-c", CUDA_RUNNER, str(config), str(log.parent / "run"), *values],
            env=env, stdout=subprocess.PIPE, stderr=err, text=True, check=False,
        )  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"training failed ({log}):\n{proc.stdout[-2000:]}\n{tail(log, 30)}")
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    metrics = log.parent / "run" / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()] if metrics.is_file() else []
    logged = [r["mem_used_mb"] for r in rows if isinstance(r.get("mem_used_mb"), (int, float))]
    found["logged_mem_used_mb_max"] = max(logged) if logged else None  # the run's own metric (max_memory_allocated)
    return found


def main_cuda(args: argparse.Namespace, data_dir: Path, work: Path, env: dict[str, str], out_path: Path) -> int:
    models = {"demo (0.66M)": data_dir / "demo" / "model"}
    algorithms = {"sft": CONFIGS / "sft_tiny.yaml", "dpo": CONFIGS / "dpo_tiny.yaml"}
    dtypes = args.dtypes.split(",") if args.dtypes else ["bf16", "fp32"]
    if args.smoke:
        algorithms, dtypes = {"sft": algorithms["sft"]}, dtypes[:1]
    else:
        models["~50M"] = build_m50(data_dir)
    cases = [(m, a, d) for m in models for a in algorithms for d in dtypes]

    def one(case: tuple[str, str, str]) -> dict[str, Any]:
        model_name, algorithm, dtype = case
        model = models[model_name]
        sets = overrides(model, 1, args.steps, device="cuda", dtype=dtype)
        case_dir = work / f"{model.name}-{algorithm}-{dtype}"
        case_dir.mkdir(parents=True)
        found = cuda_case(algorithms[algorithm], sets, env, case_dir / "train.log")
        estimate = found["estimate"]
        total = float(estimate["total_gib"])
        runtime = float(estimate["parts_gib"].get("runtime", 0.0))
        allocated, reserved = found["max_allocated_gib"], found["max_reserved_gib"]
        context = found["cuda_context_gib"]
        row = {
            "model": model_name,
            "algorithm": algorithm,
            "processes": 1,
            "device": "cuda",
            "dtype": dtype,
            "status": found["status"],
            "steps": found["step"],
            "estimate_gib": round(total, 3),
            "estimate_parts_gib": estimate["parts_gib"],
            "estimate_without_runtime_gib": round(total - runtime, 3),
            "max_allocated_gib": round(allocated, 4),
            "max_reserved_gib": round(reserved, 4),
            "cuda_context_gib": None if context is None else round(context, 3),
            "logged_mem_used_mb_max": found["logged_mem_used_mb_max"],
            # the headline: the allocator's peak against the whole estimate
            "measured_gib": round(allocated, 4),
            "ratio": round(allocated / total, 3),
            "ratio_reserved": round(reserved / total, 3),
            # like for like: tensors against the tensor parts; reserved + context against the whole estimate
            "ratio_allocated_vs_tensor_parts": round(allocated / (total - runtime), 3) if total > runtime else None,
            "ratio_reserved_plus_context": None if context is None else round((reserved + context) / total, 3),
            "device_name": found["device_name"],
        }
        row["within_30pct"] = abs(row["ratio"] - 1) <= 0.30
        print(json.dumps(row), flush=True)
        with lock:  # the report so far, in case a later case fails or the run is cut short
            done.append(row)
            write_json(out_path, {**report, "rows": done, "complete": False})
        return row

    report: dict[str, Any] = {"machine": machine_info(), "device": "cuda", "steps": args.steps, "jobs": args.jobs}
    done: list[dict[str, Any]] = []
    lock = threading.Lock()
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:  # separate processes: separate counters
        rows = list(pool.map(one, cases))
    report.update(rows=rows, complete=True)
    write_json(out_path, report)
    print_table(
        ["model", "algorithm", "dtype", "estimate GiB", "max allocated GiB", "max reserved GiB", "context GiB",
         "allocated/estimate", "allocated/(estimate - runtime)", "(reserved + context)/estimate"],
        [
            [r["model"], r["algorithm"], r["dtype"], fmt(r["estimate_gib"], ".3f"), fmt(r["max_allocated_gib"], ".3f"),
             fmt(r["max_reserved_gib"], ".3f"), fmt(r["cuda_context_gib"], ".3f"), fmt(r["ratio"]),
             fmt(r["ratio_allocated_vs_tensor_parts"]), fmt(r["ratio_reserved_plus_context"])]
            for r in rows
        ],
    )  # fmt: skip
    print(f"report: {out_path}")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--output", type=Path, default=None)
    p.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--dtypes", default=None, help="cuda: comma-separated model.dtype values (default bf16,fp32)")
    p.add_argument("--jobs", type=int, default=1, help="cuda: cases at once (own processes; NVML context needs 1)")
    args = p.parse_args()
    default_out = RESULTS_DIR / ("memory_cuda.json" if args.device == "cuda" else "memory.json")
    name = "memory" if args.device == "cpu" else f"memory_{args.device}"
    out_path = smoke_report(name, args.output) if args.smoke else (args.output or default_out)
    work = Path(tempfile.mkdtemp(prefix="tp_bench_memory_"))
    data_dir = work / "data"
    prepare_demo(data_dir, work / "logs")
    env = bench_env(data_dir)
    if args.device == "cuda":
        return main_cuda(args, data_dir, work, env, out_path)

    models = {"demo (0.66M)": data_dir / "demo" / "model"}
    algorithms = {"sft": CONFIGS / "sft_tiny.yaml", "dpo": CONFIGS / "dpo_tiny.yaml"}
    processes = [1, 2]
    steps = args.steps
    if args.smoke:
        algorithms, processes, steps = {"sft": algorithms["sft"]}, [1], 2
    else:
        models["~50M"] = build_m50(data_dir)
    rows: list[dict[str, Any]] = []
    for model_name, model in models.items():
        for algorithm, config in algorithms.items():
            for n in processes:
                sets = overrides(model, n, steps)
                case = work / f"{model.name}-{algorithm}-{n}"
                case.mkdir(parents=True)
                estimate = estimate_gib(config, sets, env)
                measured = measured_peak_gib(config, sets, env, case / "train.log")
                rows.append(
                    {
                        "model": model_name,
                        "algorithm": algorithm,
                        "processes": n,
                        "estimate_gib": round(estimate, 3),
                        "measured_gib": round(measured, 3),
                        "ratio": round(measured / estimate, 3),
                        "within_30pct": abs(measured / estimate - 1) <= 0.30,
                    }
                )
                print(rows[-1], flush=True)
    report = {"machine": machine_info(), "steps": steps, "rows": rows}
    write_json(out_path, report)
    print_table(
        ["model", "algorithm", "processes", "estimate GiB", "measured GiB", "measured/estimate", "within 30%"],
        [
            [r["model"], r["algorithm"], str(r["processes"]), fmt(r["estimate_gib"], ".3f"),
             fmt(r["measured_gib"], ".3f"), fmt(r["ratio"]), "yes" if r["within_30pct"] else "NO"]
            for r in rows
        ],
    )  # fmt: skip
    print(f"report: {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

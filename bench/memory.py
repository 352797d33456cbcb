"""How close is the preflight's memory estimate (training/memory.py) to the real peak? On CPU: the demo model
(0.66M parameters) and a ~50M-parameter Qwen2 built the same way, SFT and DPO, one process and two (torchrun),
each compared as measured peak RSS of the largest training process / the estimate printed by `tp train --dry-run`.

The estimate is per device (per process); the measurement is `ru_maxrss` of the largest process `tp train` started
(for one process, the process itself; for torchrun, a rank). The issue's bar is within +-30%.

    .venv/bin/python bench/memory.py                  # 2 models x SFT, DPO x 1, 2 processes, 20 steps each
    .venv/bin/python bench/memory.py --smoke          # the demo model, SFT, 1 process, 2 steps
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
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


def overrides(model: Path, processes: int, steps: int) -> list[str]:
    sets = [
        f"model.path={model}",
        "model.dtype=fp32",
        "resources.device=cpu",
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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--output", type=Path, default=None)
    p.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = p.parse_args()
    out_path = smoke_report("memory", args.output) if args.smoke else (args.output or RESULTS_DIR / "memory.json")
    work = Path(tempfile.mkdtemp(prefix="tp_bench_memory_"))
    data_dir = work / "data"
    prepare_demo(data_dir, work / "logs")
    env = bench_env(data_dir)

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

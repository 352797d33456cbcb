"""Curriculum vs uniform sampling on the same budget (data.sampling, training/sampling.py).

Multi-operand addition (`3 + 4 + 1 =` -> `8`, 2 to 5 operands) has real difficulty spread under the audit report's
features (words, numeric steps, numbers): the buckets are easy = 2 operands ... hard = 5. Two SFT runs of the tiny
demo model with the same steps, batch, learning rate and seed; only `data.sampling` differs:
- uniform: the trainer's own shuffling;
- curriculum: easy only, then easy/medium, then a hard-heavy mix (schedule below).
Reported: final eval loss on a held-out set with every operand count in equal parts, and the ratio curriculum /
uniform (< 1: the curriculum did better on the same budget).

    .venv/bin/python bench/curriculum.py                 # ~2-4 min on 2 CPU cores
    .venv/bin/python bench/curriculum.py --steps 300 --seeds 0 1
    .venv/bin/python bench/curriculum.py --smoke         # 4 steps each, 200 rows, the schedule scaled down

Exit 0 when every run finished (a measurement, not a test); 1 when one failed.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402 - the bench dir is not a package
    RESULTS_DIR,
    SMOKE_HELP,
    bench_env,
    fmt,
    machine_info,
    prepare_demo,
    print_table,
    read_jsonl,
    run_logged,
    smoke_report,
    tail,
    tp_command,
    write_json,
)

SCHEDULE = [
    {"until_step": 60, "mix": {"easy": 1.0}},
    {"until_step": 120, "mix": {"easy": 0.4, "medium": 0.4, "hard": 0.2}},
    {"until_step": 1_000_000, "mix": {"easy": 0.2, "medium": 0.3, "hard": 0.5}},
]
# --smoke: 4 steps, every stage of the schedule visited
SMOKE_SCHEDULE = [{**stage, "until_step": until} for stage, until in zip(SCHEDULE, (2, 3, 1_000_000), strict=True)]


def synth(path: Path, n: int, seed: int) -> None:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        k = 2 + i % 4
        operands = [rng.randint(0, 9) for _ in range(k)]
        rows.append(
            {
                "messages": [
                    {"role": "user", "content": " + ".join(map(str, operands)) + " ="},
                    {"role": "assistant", "content": str(sum(operands))},
                ]
            }
        )
    rng.shuffle(rows)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def config(train: Path, eval_file: Path, steps: int, seed: int, sampling: dict) -> dict:
    return {
        "model": {"path": "demo/model"},
        "data": {"train_file": str(train), "eval_file": str(eval_file), "max_length": 48, "sampling": sampling},
        "algorithm": {"name": "sft", "assistant_only_loss": True},
        "training": {
            "learning_rate": 2e-3,
            "lr_scheduler": "cosine",
            "warmup_ratio": 0.05,
            "max_steps": steps,
            "per_device_batch_size": 16,
            "per_device_eval_batch_size": 64,
            "logging_steps": 20,
            "save_steps": steps,
            "eval_steps": steps // 2,
            "seed": seed,
        },
        "resources": {"device": "cpu"},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--report", type=Path, default=None, help="default bench/results/curriculum.json")
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP + ": 4 steps, 1 seed, 200 + 40 rows")
    args = parser.parse_args()
    if args.smoke:
        args.steps, args.seeds = 4, args.seeds[:1]
        args.report = smoke_report("curriculum", args.report)
    elif args.report is None:
        args.report = RESULTS_DIR / "curriculum.json"
    work = Path(tempfile.mkdtemp(prefix="tp-curriculum-"))
    try:
        return run(args, work)
    finally:
        if args.smoke:
            shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace, work: Path) -> int:
    import yaml

    data_dir = work / "data"
    prepare_demo(data_dir, work / "logs")
    env = bench_env(data_dir)
    train, evaluation = work / "train.jsonl", work / "eval.jsonl"
    synth(train, 200 if args.smoke else 2000, seed=1)
    synth(evaluation, 40 if args.smoke else 200, seed=2)
    schedule = SMOKE_SCHEDULE if args.smoke else SCHEDULE
    strategies = {"uniform": {"strategy": "uniform"}, "curriculum": {"strategy": "curriculum", "schedule": schedule}}
    results: dict[str, list[dict]] = {name: [] for name in strategies}
    for seed in args.seeds:
        for name, sampling in strategies.items():
            cfg_path = work / f"{name}-{seed}.yaml"
            cfg_path.write_text(yaml.safe_dump(config(train, evaluation, args.steps, seed, sampling)))
            run = work / f"run-{name}-{seed}"
            t0 = time.time()
            rc, wall = run_logged(
                [*tp_command(), "train", str(cfg_path), "--output", str(run)], env, work / "logs" / f"{name}-{seed}.log"
            )
            if rc != 0:
                print(f"{name} seed {seed} failed (exit {rc}):\n{tail(work / 'logs' / f'{name}-{seed}.log')}")
                return 1
            evals = [r for r in read_jsonl(run / "metrics.jsonl") if "eval_loss" in r]
            train_rows = [r for r in read_jsonl(run / "metrics.jsonl") if "loss" in r]
            sampling_json = json.loads((run / "sampling.json").read_text())
            results[name].append(
                {
                    "seed": seed,
                    "wall_s": round(wall or time.time() - t0, 1),
                    "eval_loss": evals[-1]["eval_loss"],
                    "eval_loss_mid": evals[0]["eval_loss"],
                    "final_train_loss": train_rows[-1]["loss"],
                    "bucket_rows": sampling_json["bucket_rows"],
                    "stages": [
                        {"steps": s["steps"], "drawn_mix": s["drawn_mix"]} for s in sampling_json.get("stages", [])
                    ],
                }
            )
    mean = {name: statistics.mean(r["eval_loss"] for r in rows) for name, rows in results.items()}
    mid = {name: statistics.mean(r["eval_loss_mid"] for r in rows) for name, rows in results.items()}
    print_table(
        ["sampling", f"eval loss @ {args.steps // 2}", f"eval loss @ {args.steps}", "ratio vs uniform", "wall s"],
        [
            [
                name,
                fmt(mid[name], ".4f"),
                fmt(mean[name], ".4f"),
                fmt(mean[name] / mean["uniform"], ".3f"),
                fmt(statistics.mean(r["wall_s"] for r in results[name]), ".0f"),
            ]
            for name in results
        ],
    )
    write_json(
        args.report,
        {
            "machine": machine_info(),
            "steps": args.steps,
            "seeds": args.seeds,
            "schedule": schedule,
            "results": results,
            "mean_eval_loss": mean,
            "ratio_curriculum_vs_uniform": mean["curriculum"] / mean["uniform"],
        },
    )
    print(f"report: {args.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""TRL against verl on the same job (SFT, or GRPO from one SFT checkpoint): steps/s, loss curves side by side and peak
memory, in fresh `tp train` processes alternated round by round (ABBA), so drift on a shared machine hits both sides
alike.

Same demo model, data, fp32, batch, learning rate and steps; one process on CPU. Steps/s = 1 / the median
`sec_per_step` of the logged steps after the first two (both engines log it per step through the RunWriter); wall
and CPU seconds of the whole process (imports, validation, model load, checkpoints, final/); peak RSS of the
process tree (wait4's ru_maxrss). The engines shuffle with different generators, so their batches - and losses -
differ step by step: the curves show both learn at the same pace, not that they are equal.

    .venv/bin/python bench/engines.py                  # 3 rounds x 60 steps -> bench/results/engines.json
    .venv/bin/python bench/engines.py --algorithm grpo --steps 20   # demo and ~24M -> bench/results/engines_grpo.json
    .venv/bin/python bench/engines.py --smoke [--algorithm grpo]    # 1 round x 3 steps (GRPO: from the demo model)

GRPO (`grpo_tiny.yaml`: 2 prompts x 8 generations, 8 new tokens) starts from a 150-step SFT checkpoint made once.
It adds tokens/s (completion tokens generated per second of step), the rollout's share of a step (verl logs its
generation time, `timing_s/gen`; TRL logs none outside W&B/MLflow profiling, so it is not reported for TRL) and the
peak RSS summed over the whole process tree, sampled every 0.5 s (verl's Ray workers are separate processes), and
where a verl step's time goes (its `timing_s/*`: rollout, old log-probs, update, weight sync) as shares of the step.
`--sizes demo,m25` (the default) runs it at the demo size and at ~24M parameters (the demo recipe, random weights),
where compute, not per-step overhead, dominates; the smoke runs the demo size only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402 - the bench dir is not a package
    CONFIGS,
    RESULTS_DIR,
    SMOKE_HELP,
    bench_env,
    fmt,
    machine_info,
    median,
    prepare_demo,
    print_table,
    read_jsonl,
    smoke_report,
    tail,
    tp_command,
    write_json,
)

ENGINES = ("trl", "verl")


def tree_rss_mb(pid: int) -> float:
    """RSS of a process and all its descendants, in MB (0 once it is gone)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            continue
    return total / (1 << 20)


# The larger GRPO size (--sizes m25): ~24M parameters, 8 blocks of hidden 512 with the demo tokenizer, built by the
# demo recipe with random weights (throughput does not need a trained start); compute dominates a step there.
M25 = {"hidden_size": 512, "num_layers": 8, "num_heads": 8, "num_kv_heads": 4, "intermediate_size": 1408}
# verl's per-step timings (its `timing_s/*`), reported as shares of the step: where a verl step's time goes.
VERL_PHASES = ("gen", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor", "update_weights")


def build_m25(data_dir: Path) -> Path:
    from training_platform.demo.arithmetic import dataset_texts
    from training_platform.demo.tiny_model import create_tiny_model

    out = data_dir / "models" / "m25"
    if not (out / "config.json").is_file():
        create_tiny_model(out, extra_corpus=list(dataset_texts(data_dir / "demo" / "data")), **M25)
    return out


def parameters(model: Path) -> int:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        net = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model))
    return sum(p.numel() for p in net.parameters())


def grpo_run(
    engine: str, base: Path, env: dict[str, str], steps: int, sft: Path, index: int, size: str = "demo"
) -> dict[str, Any]:
    """One GRPO run from `sft` (a model directory); the process tree's summed RSS is sampled while it runs."""
    run_dir = base / f"grpo-{size}-{index}-{engine}"
    log_path = base / f"grpo-{size}-{index}-{engine}.log"
    sets = {
        "engine": engine,
        "model.path": str(sft),
        "model.dtype": "fp32",
        "resources.device": "cpu",
        "training.max_steps": steps,
        "training.save_steps": steps,
        "training.logging_steps": 1,
        "training.seed": 0,
    }
    cmd = [*tp_command(), "train", str(CONFIGS / "grpo_tiny.yaml"), "--output", str(run_dir)]
    for key, value in sets.items():
        cmd += ["--set", f"{key}={value}"]
    load = os.getloadavg()[0]
    peak = 0.0
    with log_path.open("w") as log:
        started, started_at = time.perf_counter(), time.time()
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        while proc.poll() is None:
            peak = max(peak, tree_rss_mb(proc.pid))
            time.sleep(0.5)
        wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{engine}: tp train failed:\n{tail(log_path, 30)}")
    rows = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "loss" in r]
    late = [r for r in rows if r["step"] > 2 and r.get("sec_per_step")]
    per_step = [r["sec_per_step"] for r in late]
    tokens = [r["completions/mean_length"] * 16 / r["sec_per_step"] for r in late if "completions/mean_length" in r]
    gen_share = [r["timing_s/gen"] / r["sec_per_step"] for r in late if "timing_s/gen" in r]
    phases = {
        phase: round(statistics.median(shares), 3)
        for phase in VERL_PHASES
        if (shares := [r[f"timing_s/{phase}"] / r["sec_per_step"] for r in late if f"timing_s/{phase}" in r])
    }
    result = {
        "engine": engine,
        "size": size,
        "phase_shares": phases,
        "steps_per_s": round(1 / statistics.median(per_step), 3),
        "tokens_per_s": round(statistics.median(tokens), 1) if tokens else None,
        "rollout_share": round(statistics.median(gen_share), 3) if gen_share else None,
        "wall_seconds": round(wall, 2),
        # process start -> the first step's metric row: imports, validation, model load and, for verl, its Ray
        "start_to_first_step_s": round(rows[0]["ts"] - started_at, 1) if rows and "ts" in rows[0] else None,
        "peak_rss_mb": round(peak, 1),
        "load_avg_1m_before": round(load, 2),
        "rewards": [round(r.get("reward", float("nan")), 4) for r in rows],
    }
    shutil.rmtree(run_dir, ignore_errors=True)
    return result


def grpo_main(args: argparse.Namespace) -> int:
    output = args.output or RESULTS_DIR / "engines_grpo.json"
    base = Path(tempfile.mkdtemp(prefix="tp_engines_grpo_"))
    try:
        data_dir = base / "data"
        prepare_demo(data_dir, base)
        env = bench_env(data_dir)
        models: dict[str, Path] = {}
        if args.smoke:  # no SFT run: GRPO starts from the demo model itself (its rewards are then mostly 0)
            models["demo"] = data_dir / "demo" / "model"
        elif "demo" in args.sizes:
            sft_dir = base / "sft"
            sft_cmd = [*tp_command(), "train", str(CONFIGS / "sft_tiny.yaml"), "--output", str(sft_dir)]
            subprocess.run([*sft_cmd, "--set", "training.max_steps=150"], env=env, check=True, capture_output=True)
            models["demo"] = sft_dir / "final"
        if "m25" in args.sizes and not args.smoke:
            models["m25"] = build_m25(data_dir)
        params = {size: parameters(model) for size, model in models.items()}
        print(f"engines (grpo): {args.rounds} rounds x {args.steps} steps, sizes {params}", flush=True)
        runs = []
        for size, start_model in models.items():
            for i in range(args.rounds):
                for engine in ENGINES if i % 2 == 0 else reversed(ENGINES):
                    r = grpo_run(engine, base, env, args.steps, start_model, i, size)
                    print(
                        f"[{size} round {i + 1}] {engine:5s} {r['steps_per_s']:6.2f} steps/s, {r['tokens_per_s']} "
                        f"tokens/s, rollout share {r['rollout_share']}, wall {r['wall_seconds']} s, peak RSS "
                        f"{r['peak_rss_mb']} MB, load {r['load_avg_1m_before']}, phases {r['phase_shares']}",
                        flush=True,
                    )
                    runs.append(r)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    keys = ("steps_per_s", "tokens_per_s", "rollout_share", "wall_seconds", "start_to_first_step_s", "peak_rss_mb")
    by_size: dict[str, Any] = {}
    for size in models:
        mine = [r for r in runs if r["size"] == size]
        summary = {
            e: {k: median([r[k] for r in mine if r["engine"] == e and r[k] is not None]) for k in keys} for e in ENGINES
        }
        summary["verl"]["phase_shares"] = {
            phase: median(
                [r["phase_shares"][phase] for r in mine if r["engine"] == "verl" and phase in r["phase_shares"]]
            )
            for phase in VERL_PHASES
            if any(phase in r["phase_shares"] for r in mine if r["engine"] == "verl")
        }
        summary["verl_over_trl_steps_per_s"] = summary["verl"]["steps_per_s"] / summary["trl"]["steps_per_s"]
        summary["parameters"] = params[size]
        by_size[size] = summary
        print(f"\n{size} ({params[size] / 1e6:.2f}M parameters)")
        print_table(
            [
                "engine",
                "steps/s (median)",
                "vs trl",
                "tokens/s",
                "rollout share",
                "wall s",
                "start to step 1 s",
                "peak RSS MB (tree)",
            ],
            [
                [
                    e,
                    fmt(summary[e]["steps_per_s"], ".2f"),
                    fmt(summary[e]["steps_per_s"] / summary["trl"]["steps_per_s"], ".3f"),
                    fmt(summary[e]["tokens_per_s"], ".1f"),
                    fmt(summary[e]["rollout_share"], ".2f"),
                    fmt(summary[e]["wall_seconds"], ".1f"),
                    fmt(summary[e]["start_to_first_step_s"], ".1f"),
                    fmt(summary[e]["peak_rss_mb"], ".0f"),
                ]
                for e in ENGINES
            ],
        )
        shares = summary["verl"]["phase_shares"]
        print("verl step: " + ", ".join(f"{phase} {share:.0%}" for phase, share in shares.items()))
    write_json(
        output,
        {
            "bench": "engines_grpo",
            "machine": machine_info(),
            "rounds": args.rounds,
            "steps": args.steps,
            "runs": runs,
            "median": by_size[next(iter(by_size))] if len(by_size) == 1 else by_size.get("demo", {}),
            "sizes": by_size,
        },
    )
    print(f"\nwrote {output}")
    return 0


def one_run(engine: str, base: Path, env: dict[str, str], steps: int, batch: int, index: int) -> dict[str, Any]:
    run_dir = base / f"run-{index}-{engine}"
    log_path = base / f"run-{index}-{engine}.log"
    cmd = [
        *tp_command(),
        "train",
        str(CONFIGS / "sft_tiny.yaml"),
        "--output",
        str(run_dir),
        "--set",
        f"engine={engine}",
        "--set",
        "model.dtype=fp32",
        "--set",
        "resources.device=cpu",
        "--set",
        f"training.max_steps={steps}",
        "--set",
        f"training.save_steps={steps}",
        "--set",
        "training.logging_steps=1",
        "--set",
        "training.eval_steps=null",
        "--set",
        "data.eval_file=null",
        "--set",
        f"training.per_device_batch_size={batch}",
        "--set",
        "training.warmup_ratio=0",
        "--set",
        "training.lr_scheduler=constant",
    ]
    load = os.getloadavg()[0]
    with log_path.open("w") as log:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{engine}: tp train failed:\n{tail(log_path, 30)}")
    rows = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "loss" in r]
    per_step = [r["sec_per_step"] for r in rows if r["step"] > 2 and r.get("sec_per_step")]
    result = {
        "engine": engine,
        "steps_per_s": round(1 / statistics.median(per_step), 3),
        "wall_seconds": round(wall, 2),
        "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "load_avg_1m_before": round(load, 2),
        "losses": [round(r["loss"], 4) for r in rows],
    }
    shutil.rmtree(run_dir, ignore_errors=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument(
        "--output", type=Path, default=None, help="default: bench/results/engines.json (GRPO: engines_grpo.json)"
    )
    parser.add_argument("--algorithm", choices=("sft", "grpo"), default="sft")
    parser.add_argument(
        "--sizes",
        default="demo,m25",
        help="GRPO: model sizes, comma-separated: demo (0.66M, from a 150-step SFT) and m25 (~24M, random weights)",
    )
    parser.add_argument(
        "--smoke", action="store_true", help=SMOKE_HELP + ": 1 round x 3 steps, batch 4; GRPO from the demo model"
    )
    args = parser.parse_args(argv)
    args.sizes = [size.strip() for size in args.sizes.split(",") if size.strip()]
    if not args.sizes or set(args.sizes) - {"demo", "m25"}:
        parser.error(f"--sizes: demo and/or m25, got {args.sizes}")
    if args.smoke:
        args.rounds, args.steps, args.batch = 1, 3, 4  # 3: steps/s is taken over the steps after the first two
        args.output = smoke_report(f"engines_{args.algorithm}", args.output)
    if args.algorithm == "grpo":
        return grpo_main(args)
    args.output = args.output or RESULTS_DIR / "engines.json"

    base = Path(tempfile.mkdtemp(prefix="tp_engines_"))
    try:
        data_dir = base / "data"
        prepare_demo(data_dir, base)
        env = bench_env(data_dir)
        print(f"engines: {args.rounds} rounds x {args.steps} steps, batch {args.batch}, fp32 CPU", flush=True)
        runs = []
        for i in range(args.rounds):
            for engine in ENGINES if i % 2 == 0 else reversed(ENGINES):
                r = one_run(engine, base, env, args.steps, args.batch, i)
                print(
                    f"[round {i + 1}] {engine:5s} {r['steps_per_s']:6.2f} steps/s, wall {r['wall_seconds']} s, "
                    f"cpu {r['cpu_seconds']} s, peak RSS {r['peak_rss_mb']} MB, load {r['load_avg_1m_before']}",
                    flush=True,
                )
                runs.append(r)
    finally:
        shutil.rmtree(base, ignore_errors=True)

    summary = {
        e: {
            k: median([r[k] for r in runs if r["engine"] == e])
            for k in ("steps_per_s", "wall_seconds", "cpu_seconds", "peak_rss_mb")
        }
        for e in ENGINES
    }
    rows = [
        [
            e,
            fmt(s["steps_per_s"], ".2f"),
            fmt(s["steps_per_s"] / summary["trl"]["steps_per_s"], ".3f"),
            fmt(s["wall_seconds"], ".1f"),
            fmt(s["cpu_seconds"], ".1f"),
            fmt(s["peak_rss_mb"], ".0f"),
        ]
        for e, s in summary.items()
    ]
    print()
    print_table(["engine", "steps/s (median)", "vs trl", "wall s", "cpu s", "peak RSS MB"], rows)
    first = {e: next(r["losses"] for r in runs if r["engine"] == e) for e in ENGINES}
    print("\nloss every 10 steps (round 1):")
    print_table(
        ["step", *ENGINES],
        [[str(s + 1), *(fmt(first[e][s], ".3f") for e in ENGINES)] for s in range(0, args.steps, 10)]
        + [[str(args.steps), *(fmt(first[e][-1], ".3f") for e in ENGINES)]],
    )
    write_json(
        args.output,
        {
            "bench": "engines",
            "machine": machine_info(),
            "rounds": args.rounds,
            "steps": args.steps,
            "batch": args.batch,
            "runs": runs,
            "median": summary,
        },
    )
    print(f"\nwrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What does `tp train` cost on top of TRL itself? The same SFT job through `tp train` and through a bare TRL script.

The platform wraps TRL with config validation, preflight checks (reads the model and every dataset row), a run
directory, metrics/checkpoint callbacks (metrics.jsonl, step_NNNNNN checkpoints hashed into a manifest), token
counting and a final-model save. This bench shows how much of that shows up (a) inside the training loop -
steps / train_runtime, as reported by the Trainer itself - and (b) in the wall-clock time of the whole process
(imports, validation, dataset preparation, saving).

Both sides run the same job: demo/data/sft.jsonl, the demo model, and the training settings of
configs/examples/sft_tiny.yaml (seed, batch size, learning rate + schedule + warmup, max_length,
assistant_only_loss, logging_steps, save_steps; fp32 without gradient checkpointing and plain AdamW, which tp
sets but TRL's SFTConfig does not default to), without evaluation. An equal `train_loss` on both sides confirms
it is the same computation. The bare script also checkpoints at the same steps (including the final step, which
tp always checkpoints) and saves the final model, so neither side skips I/O the other does. Runs alternate tp,
bare, tp, bare... in fresh processes with the same environment (same torch thread count), because timings on a
shared 2-core machine drift by several x: medians over alternated pairs cancel most of that drift, and the
whole-process CPU seconds are reported next to wall time because other jobs inflate them much less.

    .venv/bin/python bench/engine_overhead.py                 # 3 pairs x 200 steps
    .venv/bin/python bench/engine_overhead.py --repeats 5 --steps 300
    .venv/bin/python bench/engine_overhead.py --smoke         # 1 pair x 2 steps, no warm-up
"""

from __future__ import annotations

import argparse
import json
import shutil
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
    median,
    prepare_demo,
    print_table,
    read_run_info,
    run_measured,
    smoke_report,
    tail,
    tp_command,
    write_json,
)

SFT_CONFIG = CONFIGS / "sft_tiny.yaml"

# The bare TRL baseline: what a user would write without the platform. Kept as text (and written to a temp
# file) so that it runs in its own interpreter exactly like `tp train` does, and so it is easy to read as a whole.
BARE_SCRIPT = r'''
"""Bare TRL SFT: usage `python bare_sft.py SPEC.json`; prints one JSON line `BENCH_RESULT {...}` at the end."""
import json
import sys

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import SFTConfig, SFTTrainer

spec = json.loads(open(sys.argv[1], encoding="utf-8").read())


class SaveLastStep(TrainerCallback):
    """tp always checkpoints the final step; do the same so both sides write the same checkpoints."""

    def on_step_end(self, args, state, control, **kwargs):
        if state.max_steps and state.global_step >= state.max_steps:
            control.should_save = True
        return control


tokenizer = AutoTokenizer.from_pretrained(spec["model"])
if tokenizer.pad_token is None:
    tokenizer.pad_token = tokenizer.eos_token
model = AutoModelForCausalLM.from_pretrained(spec["model"], dtype=torch.float32)
with open(spec["train_file"], encoding="utf-8") as f:
    train_dataset = Dataset.from_list([json.loads(line) for line in f if line.strip()])

# tp trains in fp32 without gradient checkpointing, with plain AdamW. TRL's SFTConfig defaults differ (bf16=True,
# gradient_checkpointing=True, optim="adamw_torch_fused"), so the fair baseline sets them, unless asked for TRL's own.
precision = {} if spec["trl_defaults"] else {"bf16": False, "gradient_checkpointing": False, "optim": spec["optim"]}
args = SFTConfig(
    **precision,
    output_dir=spec["output_dir"],
    max_steps=spec["max_steps"],
    per_device_train_batch_size=spec["batch_size"],
    learning_rate=spec["learning_rate"],
    lr_scheduler_type=spec["lr_scheduler"],
    max_grad_norm=spec["max_grad_norm"],
    weight_decay=spec["weight_decay"],
    warmup_steps=spec["warmup"],  # a float < 1 is a ratio in transformers 5
    seed=spec["seed"],
    data_seed=spec["seed"],
    max_length=spec["max_length"],
    assistant_only_loss=spec["assistant_only_loss"],
    logging_steps=spec["logging_steps"],
    logging_first_step=True,
    save_strategy="steps",
    save_steps=spec["save_steps"],
    eval_strategy="no",
    use_cpu=True,
    report_to="none",
    disable_tqdm=False,
)
trainer = SFTTrainer(model=model, args=args, train_dataset=train_dataset, processing_class=tokenizer,
                     callbacks=[SaveLastStep()])
output = trainer.train()
trainer.save_model(spec["final_dir"])
tokenizer.save_pretrained(spec["final_dir"])
print("BENCH_RESULT " + json.dumps({"step": trainer.state.global_step, "metrics": output.metrics,
                                    "torch_threads": torch.get_num_threads()}), flush=True)
'''


def job_settings(
    steps: int, save_steps: int | None, logging_steps: int | None, trl_defaults: bool = False
) -> dict[str, Any]:
    """The SFT job both sides run, read from sft_tiny.yaml so the two can never drift apart (the defaults used when
    a key is absent are TrainingSection's, i.e. what tp would use)."""
    cfg = yaml.safe_load(SFT_CONFIG.read_text(encoding="utf-8"))
    t, a, d = cfg["training"], cfg["algorithm"], cfg["data"]
    warmup = t.get("warmup_steps") or t.get("warmup_ratio", 0.0)
    return {
        "model": cfg["model"]["path"],
        "train_file": d["train_file"],
        "max_steps": steps,
        "batch_size": t["per_device_batch_size"],
        "learning_rate": t["learning_rate"],
        "lr_scheduler": t.get("lr_scheduler", "linear"),
        "max_grad_norm": t.get("max_grad_norm", 1.0),
        "weight_decay": t.get("weight_decay", 0.0),
        "optim": t.get("optimizer", "adamw_torch"),
        "warmup": warmup,
        "seed": t.get("seed", 42),
        "max_length": d["max_length"],
        "assistant_only_loss": a.get("assistant_only_loss", False),
        "logging_steps": logging_steps or t.get("logging_steps", 10),
        "save_steps": save_steps or t.get("save_steps", 100),
        "trl_defaults": trl_defaults,
    }


def run_tp(job: dict[str, Any], out_dir: Path, env: dict[str, str], log_dir: Path) -> dict[str, Any]:
    sets = [
        f"training.max_steps={job['max_steps']}",
        f"training.save_steps={job['save_steps']}",
        f"training.logging_steps={job['logging_steps']}",
        "training.eval_steps=null",
        "data.eval_file=null",
    ]
    cmd = [*tp_command(), "train", str(SFT_CONFIG), "--output", str(out_dir)]
    for item in sets:
        cmd += ["--set", item]
    log = log_dir / f"{out_dir.name}.log"
    result: dict[str, Any] = {"engine": "tp", **run_measured(cmd, env, log), "log": str(log)}
    if result["exit_code"] != 0:
        result["error"] = tail(log)
        return result
    info = read_run_info(out_dir)
    result["steps"] = info.get("step")
    result["train_runtime"] = info.get("summary", {}).get("train_runtime")
    result["train_loss"] = info.get("summary", {}).get("train_loss")
    result["checkpoints"] = sorted(p.name for p in (out_dir / "checkpoints").glob("step_*"))
    return result


def run_bare(
    job: dict[str, Any], out_dir: Path, script: Path, data_dir: Path, env: dict[str, str], log_dir: Path
) -> dict[str, Any]:
    out_dir.mkdir(parents=True)
    spec = dict(
        job,
        model=str(data_dir / job["model"]),
        train_file=str(data_dir / job["train_file"]),
        output_dir=str(out_dir / "checkpoints"),
        final_dir=str(out_dir / "final"),
    )
    spec_path = out_dir / "spec.json"
    spec_path.write_text(json.dumps(spec, indent=2), encoding="utf-8")
    log = log_dir / f"{out_dir.name}.log"
    result: dict[str, Any] = {
        "engine": "bare",
        **run_measured([sys.executable, str(script), str(spec_path)], env, log),
        "log": str(log),
    }
    lines = [
        ln for ln in log.read_text(encoding="utf-8", errors="replace").splitlines() if ln.startswith("BENCH_RESULT ")
    ]
    if result["exit_code"] != 0 or not lines:
        result["error"] = tail(log)
        return result
    payload = json.loads(lines[-1].removeprefix("BENCH_RESULT "))
    result["steps"] = payload["step"]
    result["train_runtime"] = payload["metrics"].get("train_runtime")
    result["train_loss"] = payload["metrics"].get("train_loss")
    result["torch_threads"] = payload["torch_threads"]
    result["checkpoints"] = sorted(p.name for p in (out_dir / "checkpoints").glob("checkpoint-*"))
    return result


def add_rate(result: dict[str, Any]) -> dict[str, Any]:
    if result.get("steps") and result.get("train_runtime"):
        result["steps_per_second"] = round(result["steps"] / result["train_runtime"], 3)
    return result


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians per engine, ratios of the medians, and per-pair ratios (each tp run against the bare run right after
    it: closest in time, so the most similar machine load)."""
    out: dict[str, Any] = {}
    for engine in ("tp", "bare"):
        mine = [r for r in runs if r["engine"] == engine and "error" not in r]
        out[engine] = {
            "runs": len(mine),
            "median_steps_per_second": median([r.get("steps_per_second") for r in mine]),
            "median_train_runtime": median([r.get("train_runtime") for r in mine]),
            "median_wall_seconds": median([r["wall_seconds"] for r in mine]),
            "median_cpu_seconds": median([r["cpu_seconds"] for r in mine]),
        }
    tp, bare = out["tp"], out["bare"]
    out["throughput_ratio_tp_over_bare"] = _ratio(tp["median_steps_per_second"], bare["median_steps_per_second"])
    out["wall_ratio_tp_over_bare"] = _ratio(tp["median_wall_seconds"], bare["median_wall_seconds"])
    out["cpu_ratio_tp_over_bare"] = _ratio(tp["median_cpu_seconds"], bare["median_cpu_seconds"])
    pairs = [(t, b) for t, b in zip(runs[0::2], runs[1::2], strict=False) if "error" not in t and "error" not in b]
    for key, field in (("throughput", "steps_per_second"), ("wall", "wall_seconds"), ("cpu", "cpu_seconds")):
        ratios = [_ratio(t.get(field), b.get(field)) for t, b in pairs]
        out[f"pair_{key}_ratios"] = ratios
        out[f"median_pair_{key}_ratio"] = median(ratios)
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    data_dir = Path(args.data_dir).resolve() if args.data_dir else Path(tempfile.mkdtemp(prefix="tp-bench-oh-"))
    log_dir = data_dir / "bench-logs"
    env = bench_env(data_dir)
    print(f"data dir: {data_dir}", flush=True)
    prepare_demo(data_dir, log_dir)
    script = data_dir / "bare_sft.py"
    script.write_text(BARE_SCRIPT, encoding="utf-8")
    runs_root = data_dir / "overhead-runs"
    if runs_root.exists():
        shutil.rmtree(runs_root)

    job = job_settings(args.steps, args.save_steps, args.logging_steps, args.bare_trl_defaults)
    if args.warmup:
        # Untimed: the first process to import torch/transformers/trl pays for a cold page cache.
        print("warm-up: one short run of each (not recorded)", flush=True)
        warm = dict(job, max_steps=5, save_steps=5)
        run_tp(warm, runs_root / "warmup-tp", env, log_dir)
        run_bare(warm, runs_root / "warmup-bare", script, data_dir, env, log_dir)

    runs: list[dict[str, Any]] = []
    for i in range(1, args.repeats + 1):
        for engine in ("tp", "bare"):
            out_dir = runs_root / f"{engine}-{i}"
            if engine == "tp":
                result = run_tp(job, out_dir, env, log_dir)
            else:
                result = run_bare(job, out_dir, script, data_dir, env, log_dir)
            result["pair"] = i
            runs.append(add_rate(result))
            status = (
                "FAILED"
                if "error" in result
                else (
                    f"{result['steps']} steps, train_runtime {fmt(result.get('train_runtime'))} s "
                    f"({fmt(result.get('steps_per_second'))} steps/s), wall {result['wall_seconds']:.1f} s, "
                    f"cpu {result['cpu_seconds']:.1f} s, load {fmt(result.get('load_avg_1m_before'))}"
                )
            )
            print(f"[pair {i}] {engine:4s}: {status}", flush=True)
            if not args.keep_checkpoints:
                shutil.rmtree(out_dir / "checkpoints", ignore_errors=True)

    report = {
        "bench": "engine_overhead",
        "machine": machine_info(),
        "data_dir": str(data_dir),
        "job": job,
        "repeats": args.repeats,
        "runs": runs,
        "summary": summarise(runs),
    }
    return report


def print_report(report: dict[str, Any]) -> None:
    rows = [
        [
            str(r["pair"]),
            r["engine"],
            str(r.get("steps", "-")),
            fmt(r.get("train_runtime")),
            fmt(r.get("steps_per_second")),
            fmt(r["wall_seconds"]),
            fmt(r["cpu_seconds"]),
            fmt(r.get("load_avg_1m_before")),
            fmt(r.get("train_loss"), ".4f"),
            "FAILED" if "error" in r else "ok",
        ]
        for r in report["runs"]
    ]
    print()
    print_table(
        ["pair", "engine", "steps", "train_runtime s", "steps/s", "wall s", "cpu s", "load", "train_loss", ""], rows
    )
    s = report["summary"]
    print()
    for engine in ("tp", "bare"):
        e = s[engine]
        print(
            f"{engine:4s}: median {fmt(e['median_steps_per_second'])} steps/s, median train_runtime "
            f"{fmt(e['median_train_runtime'])} s, median wall {fmt(e['median_wall_seconds'])} s, median cpu "
            f"{fmt(e['median_cpu_seconds'])} s ({e['runs']} runs)"
        )
    for key, label in (
        ("throughput", "training-loop steps/s"),
        ("wall", "whole-process wall s"),
        ("cpu", "whole-process cpu s"),
    ):
        print(
            f"tp/bare {label:22s}: ratio of medians {fmt(s.get(f'{key}_ratio_tp_over_bare'), '.3f')}, "
            f"median of per-pair ratios {fmt(s[f'median_pair_{key}_ratio'], '.3f')} {s[f'pair_{key}_ratios']}"
        )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--steps", type=int, default=200, help="training steps per run")
    p.add_argument("--repeats", type=int, default=3, help="tp/bare pairs, run alternately")
    p.add_argument("--save-steps", type=int, default=None, help="checkpoint interval (default: sft_tiny.yaml's)")
    p.add_argument("--logging-steps", type=int, default=None, help="logging interval (default: sft_tiny.yaml's)")
    p.add_argument(
        "--bare-trl-defaults",
        action="store_true",
        help="bare side keeps SFTConfig's own bf16=True, gradient_checkpointing=True, fused AdamW "
        "(what a script that sets only the job's hyper-parameters gets) instead of matching tp",
    )
    p.add_argument("--no-warmup", dest="warmup", action="store_false", help="skip the untimed warm-up runs")
    p.add_argument("--data-dir", help="TP_DATA_DIR to build the demo in (default: a fresh temp dir)")
    p.add_argument("--report", type=Path, default=None, help="default: bench/results/engine_overhead.json")
    p.add_argument("--keep-checkpoints", action="store_true", help="keep each run's checkpoints (disk)")
    p.add_argument("--keep", action="store_true", help="keep the temp data dir afterwards")
    p.add_argument("--smoke", action="store_true", help=SMOKE_HELP + ": 1 pair x 2 steps, no warm-up")
    args = p.parse_args(argv)
    if args.smoke:
        args.steps, args.repeats, args.warmup, args.save_steps, args.logging_steps = 2, 1, False, 2, 1
        args.report = smoke_report("engine_overhead", args.report)
    elif args.report is None:
        args.report = RESULTS_DIR / "engine_overhead.json"
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        report = run(args)
    except RuntimeError as exc:  # tp demo prepare failed
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    print_report(report)
    print(f"\nreport: {write_json(args.report, report)}")
    failed = [r for r in report["runs"] if "error" in r]
    for r in failed:
        print(f"pair {r['pair']} {r['engine']} failed (log {r['log']}):\n{r['error']}", file=sys.stderr)
    if not failed and not args.keep and not args.data_dir:
        shutil.rmtree(report["data_dir"], ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

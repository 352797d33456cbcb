"""Does the tiny demo model LEARN addition through `tp train`, or does the pipeline merely run?

Loss curves can go down while the model learns nothing useful (e.g. it memorises the training pairs, or the
loss mask is wrong and it learns the prompt). So this bench measures the one thing that matters - exact-match
accuracy on *held-out* operand pairs (`rl_eval.jsonl`; neither `a+b` nor `b+a` appears in any training file) -
before training, after SFT and after GRPO from the SFT checkpoint, with GRPO run under each engine (TRL and verl:
the same reward, step budget, batch and sampling from the same SFT checkpoint), for one or more seeds. Every stage
is the real thing: a fresh `tp demo prepare`, `tp train` subprocesses with the example configs, and greedy decoding
of the saved models.

    .venv/bin/python bench/learning_arithmetic.py    # ~2 min on 2 idle CPU cores; 20+ min while other jobs run
    .venv/bin/python bench/learning_arithmetic.py --sft-steps 300 --grpo-steps 200 --keep
    .venv/bin/python bench/learning_arithmetic.py --seeds 0 1 2 --grpo-steps 100   # TRL vs verl, 3 seeds
    .venv/bin/python bench/learning_arithmetic.py --smoke   # SFT 2 steps + GRPO (TRL) 1 step, 16 held-out rows

Exit code 0 whenever every stage ran (whatever the accuracies: this is a measurement, not a test); 1 when a
stage failed. Results: a table on stdout and a JSON report (`--report`).
"""

from __future__ import annotations

import argparse
import random
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
    finish_stages_report,
    fmt,
    machine_info,
    prepare_demo,
    print_table,
    read_jsonl,
    smoke_report,
    tp_command,
    train_stage,
)

# GRPO overrides on top of grpo_tiny.yaml, chosen by a small sweep from the 850-step SFT checkpoint (bench/README.md
# lists what was tried). grpo_tiny.yaml's own learning rate (5e-4) is far too high for a converged SFT model: the
# reward collapses from ~0.94 to 0 within ~15 steps and held-out accuracy drops to 0.
DEFAULT_GRPO_SETS = [
    "training.learning_rate=3e-5",
    "training.per_device_batch_size=64",  # 8 prompts x 8 generations per step: less noisy advantages
    "algorithm.temperature=1.2",  # the SFT model is ~95% right at T=1: sample more wrong answers to learn from
    "training.logging_steps=20",
]


# ------------------------------------------------------------------------------------------------ evaluation


def exact_match(
    model_dir: Path, rows: list[dict[str, Any]], *, max_new_tokens: int = 6, batch_size: int = 64
) -> dict[str, Any]:
    """Greedy-decode every prompt with the chat template; exact match of the text before eos against `answer`.

    Left padding, so every prompt in a batch ends right where generation starts. Stricter than the GRPO
    reward (which takes the last number anywhere in the completion): "8 apples" counts as wrong here.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Loading weights" bars would drown the bench's own output
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    eos = tokenizer.eos_token_id

    predictions: list[str] = []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        texts = [tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False) for r in chunk]
        enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(
                **enc,
                do_sample=False,
                max_new_tokens=max_new_tokens,
                eos_token_id=eos,
                pad_token_id=tokenizer.pad_token_id,
            )
        for ids in out[:, enc["input_ids"].shape[1] :].tolist():
            if eos in ids:
                ids = ids[: ids.index(eos)]
            predictions.append(tokenizer.decode(ids, skip_special_tokens=True).strip())

    correct = [p == r["answer"] for p, r in zip(predictions, rows, strict=True)]
    wrong = [
        {"prompt": r["prompt"][-1]["content"], "answer": r["answer"], "predicted": p}
        for p, r, ok in zip(predictions, rows, correct, strict=True)
        if not ok
    ]
    return {
        "correct": sum(correct),
        "n": len(rows),
        "exact_match": sum(correct) / len(rows) if rows else None,
        "wrong_examples": wrong[:10],
    }


# ------------------------------------------------------------------------------------------------ stages


CURVE_KEYS = ("loss", "rewards/math_answer/mean", "mean_token_accuracy")  # first vs last fifth of training


def run_train(
    name: str, config: Path, out_dir: Path, overrides: list[str], env: dict[str, str], log_dir: Path
) -> dict[str, Any]:
    """One `tp train` subprocess of `config` with `--set` overrides (_common.train_stage)."""
    cmd = [*tp_command(), "train", str(config), "--output", str(out_dir)]
    for item in overrides:
        cmd += ["--set", item]
    keys = ("loss", "rewards/math_answer/mean", "mean_token_accuracy")
    return train_stage(name, cmd, out_dir, env, log_dir, keys, rows_with="loss", overrides=overrides)


def evaluate(
    stage: dict[str, Any], model_dir: Path, held_out: list[dict], train_sample: list[dict], max_new_tokens: int
) -> None:
    start = time.perf_counter()
    stage["held_out"] = exact_match(model_dir, held_out, max_new_tokens=max_new_tokens)
    stage["train_sample"] = exact_match(model_dir, train_sample, max_new_tokens=max_new_tokens)
    stage["eval_seconds"] = round(time.perf_counter() - start, 2)
    h, t = stage["held_out"], stage["train_sample"]
    print(
        f"[{stage['stage']}] held-out EM {h['correct']}/{h['n']} ({h['exact_match']:.1%}), "
        f"train-sample EM {t['correct']}/{t['n']} ({t['exact_match']:.1%})",
        flush=True,
    )


def run(args: argparse.Namespace) -> tuple[dict[str, Any], bool]:
    """All stages; returns (report, ok). Later stages are skipped once one fails (they need its model)."""
    data_dir = Path(args.data_dir).resolve() if args.data_dir else Path(tempfile.mkdtemp(prefix="tp-bench-learn-"))
    log_dir = data_dir / "bench-logs"
    env = bench_env(data_dir)
    report: dict[str, Any] = {
        "bench": "learning_arithmetic",
        "machine": machine_info(),
        "data_dir": str(data_dir),
        "settings": {
            "sft_steps": args.sft_steps,
            "grpo_steps": args.grpo_steps,
            "max_new_tokens": args.max_new_tokens,
            "engines": args.engines,
            "seeds": args.seeds,
        },
        "stages": [],
    }
    stages = report["stages"]

    print(f"data dir: {data_dir}", flush=True)
    report["demo_prepare_seconds"] = round(prepare_demo(data_dir, log_dir), 2)
    data = data_dir / "demo" / "data"
    held_out = read_jsonl(data / "rl_eval.jsonl")[: 16 if args.smoke else None]
    train_rows = read_jsonl(data / "rl.jsonl")
    train_sample = random.Random(0).sample(train_rows, min(args.train_sample, len(train_rows)))
    report["data"] = {
        "held_out_rows": len(held_out),
        "train_rows": len(train_rows),
        "train_sample_rows": len(train_sample),
    }

    base = {"stage": "base", "steps": 0, "wall_seconds": None, "model": str(data_dir / "demo" / "model")}
    evaluate(base, Path(base["model"]), held_out, train_sample, args.max_new_tokens)
    stages.append(base)

    runs = data_dir / "runs"
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    for seed in args.seeds:
        suffix = f"-s{seed}" if len(args.seeds) > 1 else ""
        sft_sets = [
            f"training.max_steps={args.sft_steps}",
            "training.eval_steps=null",
            "data.eval_file=null",
            f"training.save_steps={args.save_steps}",
            f"training.seed={seed}",
            *args.sft_set,
        ]
        sft = run_train(f"sft{suffix}", CONFIGS / "sft_tiny.yaml", runs / f"sft{suffix}", sft_sets, env, log_dir)
        stages.append(sft)
        if "error" in sft:
            return report, False
        evaluate(sft, Path(sft["model"]), held_out, train_sample, args.max_new_tokens)
        if args.grpo_steps <= 0:
            continue
        # The same GRPO job (reward, step budget, batch, sampling) from the same SFT checkpoint under each engine.
        for engine in engines:
            grpo_sets = [
                f"engine={engine}",
                f"model.path={sft['model']}",
                f"training.max_steps={args.grpo_steps}",
                f"training.save_steps={args.save_steps if engine == 'trl' else args.grpo_steps}",
                f"training.seed={seed}",
                *(DEFAULT_GRPO_SETS if not args.no_default_grpo_sets else []),
                *args.grpo_set,
            ]
            name = f"grpo-{engine}{suffix}" if len(engines) > 1 else f"grpo{suffix}"
            grpo = run_train(name, CONFIGS / "grpo_tiny.yaml", runs / name, grpo_sets, env, log_dir)
            grpo["engine"], grpo["seed"], grpo["from"] = engine, seed, sft["stage"]
            stages.append(grpo)
            if "error" in grpo:
                return report, False
            evaluate(grpo, Path(grpo["model"]), held_out, train_sample, args.max_new_tokens)
    return report, True


def print_report(report: dict[str, Any]) -> None:
    rows = []
    for s in report["stages"]:
        h, t = s.get("held_out"), s.get("train_sample")
        rows.append(
            [
                s["stage"],
                str(s.get("steps", "-")),
                fmt(s.get("wall_seconds"), ".1f"),
                fmt(s.get("train_runtime"), ".1f"),
                f"{h['correct']}/{h['n']} = {h['exact_match']:.1%}" if h else "FAILED",
                f"{t['correct']}/{t['n']} = {t['exact_match']:.1%}" if t else "-",
            ]
        )
    print()
    print_table(
        ["stage", "steps", "wall s", "train_runtime s", "held-out exact match", "train-sample exact match"], rows
    )
    for s in report["stages"]:
        for key, v in s.get("curve", {}).items():
            print(f"{s['stage']}: {key} {v['first']:.3f} (first fifth of logs) -> {v['last']:.3f} (last fifth)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--data-dir", help="TP_DATA_DIR to build the demo in (default: a fresh temp dir)")
    p.add_argument("--sft-steps", type=int, default=850, help="SFT steps (sft_tiny.yaml: batch 32, lr 2e-3 cosine)")
    p.add_argument("--grpo-steps", type=int, default=600, help="GRPO steps of 8 prompts x 8 completions; 0 skips GRPO")
    p.add_argument(
        "--sft-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra `tp train --set` for SFT (repeatable)",
    )
    p.add_argument(
        "--grpo-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra `tp train --set` for GRPO, applied after the defaults (repeatable)",
    )
    p.add_argument(
        "--no-default-grpo-sets",
        action="store_true",
        help=f"run grpo_tiny.yaml as it is instead of adding {' '.join(DEFAULT_GRPO_SETS)}",
    )
    p.add_argument(
        "--save-steps",
        type=int,
        default=100_000,
        help="checkpoint interval (large: only the final step is checkpointed)",
    )
    p.add_argument("--max-new-tokens", type=int, default=6)
    p.add_argument(
        "--engines", default="trl,verl", help="GRPO under each of these engines, from the same SFT checkpoint"
    )
    p.add_argument("--seeds", type=int, nargs="+", default=[0], help="one SFT + GRPO per engine for each seed")
    p.add_argument("--train-sample", type=int, default=100, help="training prompts scored for context")
    p.add_argument("--report", type=Path, default=None, help="default: bench/results/learning_arithmetic.json")
    p.add_argument("--keep", action="store_true", help="keep the temp data dir (runs, logs) afterwards")
    p.add_argument(
        "--smoke",
        action="store_true",
        help=SMOKE_HELP + ": SFT 2 steps, GRPO 1 step of 2 prompts under TRL only (verl's GRPO start-up alone "
        "takes over a minute; `engines.py --smoke --algorithm grpo` runs it), 16 held-out + 8 training prompts",
    )
    args = p.parse_args(argv)
    if args.smoke:
        args.sft_steps, args.grpo_steps, args.engines, args.seeds, args.train_sample = 2, 1, "trl", [0], 8
        args.grpo_set = [*args.grpo_set, "training.per_device_batch_size=16"]
        args.report = smoke_report("learning_arithmetic", args.report)
    elif args.report is None:
        args.report = RESULTS_DIR / "learning_arithmetic.json"
    return args


def main(argv: list[str] | None = None) -> int:
    return finish_stages_report(parse_args(argv), run, print_report)


if __name__ == "__main__":
    sys.exit(main())

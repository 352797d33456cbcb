"""Cross-check `tp eval` against lm-evaluation-harness on GSM8K-format data: same model, items, prompts, settings.

Both sides run as real CLI processes on the same local model and the same local data file: `tp eval run`
(our runner, via `python -m training_platform.cli`) and `lm_eval` (0.4.13, `--model hf`, a task YAML written
here with the same prompt, stop sequences, greedy decoding and max new tokens; lm-eval's GSM8K filters). Per item
the bench compares the rendered prompt, the raw output, the extracted answers (strict and flexible) and their
correctness, and prints the agreement and both sides' wall times.

The model: by default a tiny Qwen2 from `prepare_demo`, SFT-trained here for a few hundred steps (`tp train`) on
synthetic additions whose answers come in three styles (`a+b=N\\n#### N`, `The answer is N.`, bare `N`) so that
strict and flexible extraction both have something to find and some answers are right, some wrong. `--model DIR`
skips training; `--untrained` uses the randomly initialised demo model.

    .venv/bin/python bench/crosscheck_lmeval.py                       # trains (~3-10 min on 2 cores), then runs
    .venv/bin/python bench/crosscheck_lmeval.py --model DIR --limit 50
    .venv/bin/python bench/crosscheck_lmeval.py --smoke   # untrained model, 4 items, plain-3shot; lm_eval if installed

Settings compared (each on the same items): chat template + 0-shot, and plain text + 3-shot (few-shot examples
from a separate file, first N, `Question: ...\\nAnswer: ...` blocks, stop at `Question:`).

Known, documented differences (counted, not hidden): lm-eval's strict filter here is one regex (`#### N` or `The
answer is N`, first in the text) while ours prefers `####` anywhere over an earlier `The answer is`; lm-eval
compares strings (`8.0` != `8`), we compare numbers; lm-eval's flexible regex can return "..", which we treat as
no answer.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from _common import SMOKE_HELP, seed_demo, smoke_report  # noqa: E402 - the bench dir is not a package

LMEVAL_IGNORE = [",", "\\$", "(?s).*#### ", "\\.$"]
STRICT_REGEX = r"(?:#### |[Tt]he (?:final )?answer is:?\s*\**\s*\\?\$?\s*)(\-?[0-9\.\,]+)"
FLEXIBLE_REGEX = r"(-?[$0-9.,]{2,})|(-?[0-9]+)"


def env(threads: int) -> dict[str, str]:
    out = dict(os.environ)
    out.update(
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        OMP_NUM_THREADS=str(threads),
        MKL_NUM_THREADS=str(threads),
        PYTHONUNBUFFERED="1",
    )
    return out


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def styled_answer(a: int, b: int) -> str:
    s = a + b
    style = (7 * a + b) % 3
    if style == 0:
        return f"{a}+{b}={s}\n#### {s}"
    if style == 1:
        return f"The answer is {s}."
    return str(s)


def build_data(work: Path) -> dict[str, Path]:
    """GSM8K-format eval + few-shot files and a styled SFT set from the demo generator's held-out split."""
    from training_platform.demo import prepare_demo

    seed_demo(work / "tp_data")
    demo = prepare_demo(work / "tp_data")
    split = json.loads((demo["data"] / "split.json").read_text())
    eval_pairs = {tuple(p) for p in split["eval_pair_list"]}
    max_operand = split["max_operand"]
    train_pairs = [(a, b) for a in range(max_operand + 1) for b in range(max_operand + 1) if (a, b) not in eval_pairs]
    rng = random.Random(0)
    rng.shuffle(train_pairs)
    gold = lambda a, b: f"{a}+{b}={a + b}\n#### {a + b}"  # noqa: E731
    eval_rows = [{"question": f"{a}+{b}=", "answer": gold(a, b)} for a, b in sorted(eval_pairs)]
    eval_rows += read_jsonl(demo["data"] / "gsm8k_eval.jsonl")  # "What is a+b?" questions: mostly wrong answers
    fewshot_rows = [{"question": f"{a}+{b}=", "answer": gold(a, b)} for a, b in train_pairs[:8]]
    sft_rows = [
        {"messages": [{"role": "user", "content": f"{a}+{b}="}, {"role": "assistant", "content": styled_answer(a, b)}]}
        for a, b in train_pairs
    ]
    return {
        "model": demo["model"],
        "eval": write_jsonl(work / "gsm8k_eval.jsonl", eval_rows),
        "fewshot": write_jsonl(work / "gsm8k_fewshot.jsonl", fewshot_rows),
        "sft": write_jsonl(work / "sft_styled.jsonl", sft_rows),
        "tp_data": work / "tp_data",
    }


def train(work: Path, data: dict[str, Path], steps: int, threads: int) -> Path:
    out = work / "sft_run"
    final = out / "final"
    if (final / "model.safetensors").is_file():
        print(f"reusing trained model {final}", flush=True)
        return final
    shutil.rmtree(out, ignore_errors=True)
    cmd = [
        sys.executable,
        "-m",
        "training_platform.cli",
        "train",
        str(REPO / "configs/examples/sft_tiny.yaml"),
        "--output",
        str(out),
        "--set",
        f"data.train_file={data['sft']}",
        "--set",
        "data.eval_file=null",
        "--set",
        f"training.max_steps={steps}",
        "--set",
        f"training.save_steps={steps}",
        "--set",
        "training.eval_steps=null",
        "--set",
        "data.max_length=64",
    ]
    print(f"training the tiny model for {steps} SFT steps ...", flush=True)
    start = time.perf_counter()
    with (work / "train.log").open("w") as log:
        rc = subprocess.run(
            cmd,
            env={**env(threads), "TP_DATA_DIR": str(data["tp_data"])},
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
        ).returncode
    if rc != 0:
        raise SystemExit(f"tp train failed (exit {rc}); see {work / 'train.log'}")
    print(f"trained in {time.perf_counter() - start:.0f} s", flush=True)
    return final


def task_yaml(
    task: str, data_file: Path, fewshot_file: Path, template: str, stops: list[str], max_new_tokens: int
) -> str:
    config = {
        "task": task,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data_file), "train": str(fewshot_file)}},
        "test_split": "test",
        "fewshot_split": "train",
        "fewshot_config": {"sampler": "first_n"},
        "output_type": "generate_until",
        "doc_to_text": template,
        "doc_to_target": "{{answer}}",
        "target_delimiter": " ",
        "fewshot_delimiter": "\n\n",
        "generation_kwargs": {"until": stops, "do_sample": False, "temperature": 0.0, "max_gen_toks": max_new_tokens},
        "metric_list": [
            {
                "metric": "exact_match",
                "aggregation": "mean",
                "higher_is_better": True,
                "ignore_case": True,
                "ignore_punctuation": False,
                "regexes_to_ignore": LMEVAL_IGNORE,
            }
        ],
        "filter_list": [
            {
                "name": "strict-match",
                "filter": [{"function": "regex", "regex_pattern": STRICT_REGEX}, {"function": "take_first"}],
            },
            {
                "name": "flexible-extract",
                "filter": [
                    {"function": "regex", "group_select": -1, "regex_pattern": FLEXIBLE_REGEX},
                    {"function": "take_first"},
                ],
            },
        ],
        "metadata": {"version": 1.0},
    }
    return json.dumps(config, indent=2)  # JSON is valid YAML


def run_timed(cmd: list[str], environ: dict[str, str], log: Path) -> float:
    start = time.perf_counter()
    with log.open("w") as f:
        rc = subprocess.run(cmd, env=environ, cwd=REPO, stdout=f, stderr=subprocess.STDOUT).returncode
    elapsed = time.perf_counter() - start
    if rc != 0:
        raise SystemExit(f"command failed (exit {rc}): {' '.join(cmd)}\n{log.read_text()[-3000:]}")
    return elapsed


def fmt_s(seconds: float | None) -> str:
    return "not run" if seconds is None else f"{seconds:>7.2f} s"


def lmeval_normalise(text: Any) -> str | None:
    """lm-eval's filtered response after its regexes_to_ignore; None for [invalid] or digit-less answers."""
    if text is None or text == "[invalid]":
        return None
    text = str(text)
    for pattern in LMEVAL_IGNORE:
        text = re.sub(pattern, "", text)
    text = text.strip().lower()
    return text if any(ch.isdigit() for ch in text) else None


def lmeval_samples(out_dir: Path, task: str) -> dict[int, dict[str, Any]]:
    files = sorted(out_dir.rglob(f"samples_{task}_*.jsonl"))
    if not files:
        raise SystemExit(f"lm-eval wrote no samples for {task} under {out_dir}")
    by_doc: dict[int, dict[str, Any]] = {}
    for row in read_jsonl(files[-1]):
        entry = by_doc.setdefault(
            row["doc_id"], {"doc": row["doc"], "resps": row["resps"], "arguments": row["arguments"]}
        )
        entry[row["filter"]] = {
            "filtered": row["filtered_resps"][0] if row["filtered_resps"] else None,
            "exact_match": row["exact_match"],
        }
    return by_doc


def context_of(arguments: Any) -> str:
    if isinstance(arguments, dict):  # {"gen_args_0": {"arg_0": context, "arg_1": gen_kwargs}}
        first = next(iter(arguments.values()))
        return first.get("arg_0") if isinstance(first, dict) else first[0]
    return arguments[0][0]


def compare(ours: list[dict[str, Any]], theirs: dict[int, dict[str, Any]]) -> dict[str, Any]:
    checks = {
        k: 0
        for k in ("prompt", "output", "strict_extracted", "flexible_extracted", "strict_correct", "flexible_correct")
    }
    disagreements: list[dict[str, Any]] = []
    correct = {"ours_strict": 0, "ours_flexible": 0, "ours_primary": 0, "lmeval_strict": 0, "lmeval_flexible": 0}
    for record in ours:
        doc_id = int(record["id"])
        lm = theirs[doc_id]
        lm_output = lm["resps"][0][0] if lm["resps"] and isinstance(lm["resps"][0], list) else lm["resps"][0]
        pairs = {
            "prompt": (record["prompt"], context_of(lm["arguments"])),
            "output": (record["output"], lm_output),
            "strict_extracted": (record["extracted_strict"], lmeval_normalise(lm["strict-match"]["filtered"])),
            "flexible_extracted": (record["extracted_flexible"], lmeval_normalise(lm["flexible-extract"]["filtered"])),
            "strict_correct": (bool(record["correct_strict"]), bool(lm["strict-match"]["exact_match"])),
            "flexible_correct": (bool(record["correct_flexible"]), bool(lm["flexible-extract"]["exact_match"])),
        }
        correct["ours_strict"] += bool(record["correct_strict"])
        correct["ours_flexible"] += bool(record["correct_flexible"])
        correct["ours_primary"] += bool(record["correct"])
        correct["lmeval_strict"] += bool(lm["strict-match"]["exact_match"])
        correct["lmeval_flexible"] += bool(lm["flexible-extract"]["exact_match"])
        for key, (a, b) in pairs.items():
            if a == b:
                checks[key] += 1
            else:
                disagreements.append(
                    {"id": doc_id, "check": key, "ours": a, "lm_eval": b, "output": record["output"][:120]}
                )
    n = len(ours)
    found = {
        "strict": sum(r["extracted_strict"] is not None for r in ours),
        "flexible": sum(r["extracted_flexible"] is not None for r in ours),
    }
    return {
        "n": n,
        "agreement": {k: v / n for k, v in checks.items()},
        "counts": checks,
        "answers_found": found,
        "accuracy": {k: v / n for k, v in correct.items()},
        "disagreements": disagreements,
    }


def run_setting(name: str, model: Path, data: dict[str, Path], args: argparse.Namespace, work: Path) -> dict:
    chat = name == "chat-0shot"
    n_shot = 0 if chat else 3
    template = "{{question}}" if chat else "Question: {{question}}\nAnswer:"
    ours_template = "{question}" if chat else "Question: {question}\nAnswer:"
    stops = [] if chat else ["Question:"]
    task = f"tp_xc_{name.replace('-', '_')}"
    task_dir = work / f"tasks_{name}"
    task_dir.mkdir(exist_ok=True)
    (task_dir / f"{task}.yaml").write_text(
        task_yaml(task, data["eval"], data["fewshot"], template, stops, args.max_new_tokens)
    )
    ours_out, lm_out = work / f"ours_{name}", work / f"lmeval_{name}"
    shutil.rmtree(ours_out, ignore_errors=True)
    shutil.rmtree(lm_out, ignore_errors=True)
    environ = env(args.threads)

    ours_cmd = [
        sys.executable,
        "-m",
        "training_platform.cli",
        "eval",
        "run",
        "--model",
        str(model),
        "--benchmarks",
        "gsm8k",
        "--data",
        f"gsm8k={data['eval']}",
        "--output",
        str(ours_out),
        "--max-new-tokens",
        str(args.max_new_tokens),
        "--batch-size",
        str(args.batch_size),
        "--threads",
        str(args.threads),
        "--n-shot",
        str(n_shot),
        "--no-progress",
        "--set",
        f"gsm8k.prompt_template={json.dumps(ours_template)}",
        "--set",
        f"gsm8k.stop={json.dumps(stops)}",
        "--chat" if chat else "--no-chat",
    ]
    if not chat:
        ours_cmd += ["--fewshot-data", f"gsm8k={data['fewshot']}"]
    lm_cmd = [
        sys.executable,
        "-m",
        "lm_eval",
        "--model",
        "hf",
        "--model_args",
        f"pretrained={model},dtype=float32",
        "--device",
        "cpu",
        "--tasks",
        task,
        "--include_path",
        str(task_dir),
        "--batch_size",
        str(args.batch_size),
        "--num_fewshot",
        str(n_shot),
        "--log_samples",
        "--output_path",
        str(lm_out),
        "--seed",
        "0",
    ]
    if chat:
        lm_cmd += ["--apply_chat_template"]
    if args.limit:
        ours_cmd += ["--limit", str(args.limit)]
        lm_cmd += ["--limit", str(args.limit)]

    print(f"[{name}] tp eval run ...", flush=True)
    ours_time = run_timed(ours_cmd, environ, work / f"ours_{name}.log")
    records = read_jsonl(ours_out / "samples" / "gsm8k.jsonl")
    summary = json.loads((ours_out / "summary.json").read_text())
    if not records:
        raise SystemExit(f"tp eval run scored no items: {ours_out}")
    if args.no_anchor:  # our side only (lm_eval is not installed): what it found, nothing compared
        lm_time = None
        result: dict[str, Any] = {
            "n": len(records),
            "accuracy": {
                "ours_strict": sum(bool(r["correct_strict"]) for r in records) / len(records),
                "ours_flexible": sum(bool(r["correct_flexible"]) for r in records) / len(records),
                "ours_primary": sum(bool(r["correct"]) for r in records) / len(records),
            },
        }
    else:
        print(f"[{name}] lm_eval ...", flush=True)
        lm_time = run_timed(lm_cmd, environ, work / f"lmeval_{name}.log")
        result = compare(records, lmeval_samples(lm_out, task))
    result["time_s"] = {
        "ours_wall": round(ours_time, 2),
        "lmeval_wall": None if lm_time is None else round(lm_time, 2),
        "ours_generate": summary["benchmarks"]["gsm8k"]["time_s"].get("generate"),
    }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help="Use this model dir (no training).")
    parser.add_argument("--untrained", action="store_true", help="Use the randomly initialised demo model.")
    parser.add_argument("--train-steps", type=int, default=600)
    parser.add_argument("--limit", type=int, default=None, help="First N items (default: all, 132).")
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads on both sides.")
    parser.add_argument("--work", type=Path, help="Work dir (kept; reuses a trained model found there).")
    parser.add_argument("--settings", default="chat-0shot,plain-3shot")
    parser.add_argument("--json", type=Path, help="Write the full result (with disagreements) here.")
    parser.add_argument("--no-anchor", action="store_true", help="Our side only (no lm_eval run, nothing compared).")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=SMOKE_HELP + ": the untrained demo model, 4 items, 4 new tokens, plain-3shot; lm_eval only if installed",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.untrained, args.limit, args.max_new_tokens, args.batch_size = True, 4, 4, 4
        args.settings = "plain-3shot"
        args.json = smoke_report("crosscheck_lmeval", args.json)
        if importlib.util.find_spec("lm_eval") is None:
            args.no_anchor = True
            print("smoke: lm_eval not importable: our side only (pip install -e '.[bench]')", flush=True)

    work = args.work or Path(tempfile.mkdtemp(prefix="tp-xc-lmeval-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        return crosscheck(args, work)
    finally:
        if args.smoke and not args.work:
            shutil.rmtree(work, ignore_errors=True)


def crosscheck(args: argparse.Namespace, work: Path) -> int:
    data = build_data(work)
    if args.model:
        model = args.model
    elif args.untrained:
        model = data["model"]
    else:
        model = train(work, data, args.train_steps, args.threads)
    results = {}
    for name in [s.strip() for s in args.settings.split(",") if s.strip()]:
        results[name] = run_setting(name, model, data, args, work)

    print(f"\nmodel: {model}\nitems: {data['eval']}\n")
    compared = {name: r for name, r in results.items() if "agreement" in r}
    if compared:
        header = f"{'setting':<12} {'n':>4} " + " ".join(f"{k:>18}" for k in next(iter(compared.values()))["counts"])
        print("per-item agreement (ours vs lm-eval):")
        print(header)
    for name, r in compared.items():
        print(f"{name:<12} {r['n']:>4} " + " ".join(f"{100 * r['agreement'][k]:>17.1f}%" for k in r["counts"]))
    print("\naccuracy:")
    for name, r in results.items():
        acc = r["accuracy"]
        if name not in compared:
            print(
                f"  {name:<12} ours strict {acc['ours_strict']:.3f} flexible {acc['ours_flexible']:.3f} "
                f"primary {acc['ours_primary']:.3f} | lm-eval not run"
            )
            continue
        print(
            f"  {name:<12} ours strict {acc['ours_strict']:.3f} flexible {acc['ours_flexible']:.3f} "
            f"primary {acc['ours_primary']:.3f} | lm-eval strict {acc['lmeval_strict']:.3f} "
            f"flexible {acc['lmeval_flexible']:.3f}   (items with a strict answer: "
            f"{r['answers_found']['strict']}, with a flexible answer: {r['answers_found']['flexible']})"
        )
    print("\ntime (wall, whole CLI process incl. imports and model load):")
    for name, r in results.items():
        t = r["time_s"]
        print(
            f"  {name:<12} tp eval run {t['ours_wall']:>7.2f} s (generation {t['ours_generate']} s)   "
            f"lm_eval {fmt_s(t['lmeval_wall'])}"
        )
    for name, r in compared.items():
        for d in r["disagreements"][:10]:
            print(
                f"  DISAGREE [{name}] item {d['id']} {d['check']}: ours={d['ours']!r} lm-eval={d['lm_eval']!r} "
                f"output={d['output']!r}"
            )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        doc = {"model": str(model), "anchor": None if args.no_anchor else "lm_eval", "results": results}
        args.json.write_text(json.dumps(doc, indent=2))
        print(f"report: {args.json}")
    if not args.work and not args.smoke:
        print(f"\n(work dir kept for inspection: {work})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

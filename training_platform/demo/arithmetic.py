"""Synthetic addition data for the offline demo.

`synth_arithmetic` writes one JSONL file per training format (SFT messages, alpaca, prompt-completion,
preference, KTO, RL prompts) plus held-out eval files. The eval split holds out *unordered* operand pairs: if
`3+5` is in eval, neither `3+5` nor `5+3` appears in any training file.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from training_platform.core.files import atomic_write_text

ALPACA_INSTRUCTION = "Add the two numbers."

# The example evaluation of the demo model (the UI's default, the README's curl): GSM8K-format rows asked in the
# format the demo model was trained on, so its score moves after training.
DEMO_EVAL_BENCHMARK: dict[str, Any] = {
    "name": "gsm8k",
    "data": "demo/data/gsm8k_eval.jsonl",
    "prompt_template": "{prompt}",
    "limit": 40,
}
DEMO_EVAL_GENERATION: dict[str, Any] = {"max_new_tokens": 8}

# File stem -> file name. The names are a contract: job configs reference them.
DATA_FILES: dict[str, str] = {
    "sft": "sft.jsonl",
    "sft_eval": "sft_eval.jsonl",
    "sft_alpaca": "sft_alpaca.jsonl",
    "sft_prompt_completion": "sft_prompt_completion.jsonl",
    "preference": "preference.jsonl",
    "preference_eval": "preference_eval.jsonl",
    "kto": "kto.jsonl",
    "kto_eval": "kto_eval.jsonl",
    "rl": "rl.jsonl",
    "rl_eval": "rl_eval.jsonl",
    "gsm8k_eval": "gsm8k_eval.jsonl",
    "split": "split.json",
}

Pair = tuple[int, int]


def prompt_text(a: int, b: int) -> str:
    return f"{a}+{b}="


def answer_text(a: int, b: int) -> str:
    return str(a + b)


def user_msg(a: int, b: int) -> dict[str, str]:
    return {"role": "user", "content": prompt_text(a, b)}


def assistant_msg(content: str) -> dict[str, str]:
    return {"role": "assistant", "content": content}


def wrong_answer(correct: int, rng: random.Random) -> int:
    """`correct` plus a nonzero offset in [-3, 3], never negative."""
    offsets = [d for d in (-3, -2, -1, 1, 2, 3) if correct + d >= 0]
    return correct + rng.choice(offsets)


def split_pairs(max_operand: int, eval_fraction: float, seed: int) -> tuple[list[Pair], list[Pair]]:
    """Ordered (train, eval) operand pairs; eval holds out whole unordered pairs {a, b}."""
    if max_operand < 1:
        raise ValueError("max_operand must be >= 1")
    if not 0.0 < eval_fraction < 1.0:
        raise ValueError("eval_fraction must be in (0, 1)")
    keys = [(a, b) for a in range(max_operand + 1) for b in range(a, max_operand + 1)]
    rng = random.Random(seed)
    rng.shuffle(keys)
    n_eval = min(max(1, math.ceil(len(keys) * eval_fraction - 1e-9)), len(keys) - 1)
    eval_keys = set(keys[:n_eval])

    def orderings(keyset: Iterable[Pair]) -> list[Pair]:
        out: set[Pair] = set()
        for a, b in keyset:
            out.add((a, b))
            out.add((b, a))
        return sorted(out)

    train = orderings(k for k in keys if k not in eval_keys)
    evals = orderings(eval_keys)
    rng.shuffle(train)
    rng.shuffle(evals)
    return train, evals


def _rows(pairs: list[Pair], rng: random.Random) -> dict[str, list[dict[str, Any]]]:
    rows: dict[str, list[dict[str, Any]]] = {
        k: [] for k in ("sft", "alpaca", "prompt_completion", "preference", "kto", "rl", "gsm8k")
    }
    for a, b in pairs:
        correct = a + b
        wrong = str(wrong_answer(correct, rng))
        ans = str(correct)
        prompt = [user_msg(a, b)]
        rows["sft"].append({"messages": [user_msg(a, b), assistant_msg(ans)]})
        rows["alpaca"].append({"instruction": ALPACA_INSTRUCTION, "input": f"{a}+{b}", "output": ans})
        rows["prompt_completion"].append({"prompt": prompt, "completion": [assistant_msg(ans)]})
        rows["preference"].append(
            {"prompt": prompt, "chosen": [assistant_msg(ans)], "rejected": [assistant_msg(wrong)]}
        )
        rows["kto"].append({"prompt": prompt, "completion": [assistant_msg(ans)], "label": True})
        rows["kto"].append({"prompt": [user_msg(a, b)], "completion": [assistant_msg(wrong)], "label": False})
        rows["rl"].append({"prompt": prompt, "answer": ans})
        # `prompt`: the question as the demo model was trained to read it (the example evaluation's prompt_template
        # is "{prompt}"); a model this small cannot read "What is a+b?" and would score ~0 before and after training.
        rows["gsm8k"].append(
            {"question": f"What is {a}+{b}?", "prompt": prompt_text(a, b), "answer": f"{a}+{b}={ans}\n#### {ans}"}
        )
    return rows


def _write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> Path:
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return path


def synth_arithmetic(
    out_dir: str | Path, *, max_operand: int = 20, eval_fraction: float = 0.15, seed: int = 0
) -> dict[str, Path]:
    """Write the synthetic addition datasets to `out_dir`; returns {file stem: path}."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    train_pairs, eval_pairs = split_pairs(max_operand, eval_fraction, seed)
    # Separate RNG streams for the train and eval rows (wrong answers).
    train = _rows(train_pairs, random.Random(f"{seed}-train"))
    evals = _rows(eval_pairs, random.Random(f"{seed}-eval"))

    paths: dict[str, Path] = {}
    contents = {
        "sft": train["sft"],
        "sft_eval": evals["sft"],
        "sft_alpaca": train["alpaca"],
        "sft_prompt_completion": train["prompt_completion"],
        "preference": train["preference"],
        "preference_eval": evals["preference"],
        "kto": train["kto"],
        "kto_eval": evals["kto"],
        "rl": train["rl"],
        "rl_eval": evals["rl"],
        "gsm8k_eval": evals["gsm8k"],
    }
    for key, rows in contents.items():
        paths[key] = _write_jsonl(out / DATA_FILES[key], rows)

    split = {
        "max_operand": max_operand,
        "seed": seed,
        "eval_fraction": eval_fraction,
        "train_pairs": len(train_pairs),
        "eval_pairs": len(eval_pairs),
        "eval_pair_list": [list(p) for p in eval_pairs],
    }
    split_path = out / DATA_FILES["split"]
    atomic_write_text(split_path, json.dumps(split, indent=2) + "\n")
    paths["split"] = split_path
    return paths


def arithmetic_conversations(max_operand: int = 20) -> Iterator[list[dict[str, str]]]:
    """Every `a+b=` conversation for 0 <= a, b <= max_operand (tokenizer corpus; no split involved)."""
    for a in range(max_operand + 1):
        for b in range(max_operand + 1):
            yield [user_msg(a, b), assistant_msg(answer_text(a, b))]


def dataset_texts(data_dir: str | Path) -> Iterator[str]:
    """Plain strings found in the demo data files (alpaca instructions, GSM8K questions...), for a corpus."""
    d = Path(data_dir)
    for name in DATA_FILES.values():
        p = d / name
        if not name.endswith(".jsonl") or not p.is_file():
            continue
        with p.open(encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    yield from _strings(json.loads(line))


def _strings(obj: Any) -> Iterator[str]:
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)

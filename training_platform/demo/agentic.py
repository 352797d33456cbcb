"""Synthetic tool-use data for the offline demo: multi-digit multiplication, which the tiny demo model cannot do in
its head but can with the `calculator` tool.

`agentic_rows` gives, for seeded operand pairs (`digits`-digit x `digits`-digit; a pair and its swap land in the same
split), SFT transcripts in `messages` format and RL prompts:

- SFT: the system tools block (the text the demo template renders for `tools=[...]`: pass it as `system`, e.g.
  `data.tool_calls.tools_block([tool_schema("calculator")])`, so SFT sees the prompt an agent RL run renders), the
  question `37*48=`, the assistant's hermes call `<tool_call>{"name": "calculator", "arguments": {"expression":
  "37*48"}}</tool_call>`, the tool's result `1776`, then the final answer `#### 1776`;
- with `tool_fraction` < 1, that share of the SFT transcripts (seeded) and the rest answering in the head:
  `37*48=` -> `#### 1776` at once (the right product, which the model cannot learn to compute): a start that knows
  how to use the tool but mostly does not, for RL to teach when calling it pays;
- RL: `{"prompt": [{"role": "user", "content": "37*48="}], "answer": "1776"}` (the agent loop adds the tools block).

Pure Python, no training imports (demo/ is the lowest layer): the call text is written as the hermes codec
(`data/tool_calls.render_call`) writes it, which tests/demo checks.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from training_platform.core.files import atomic_write_text
from training_platform.demo.tiny_model import TOOL_CALL_END, TOOL_CALL_START

TOOL = "calculator"
AGENTIC_FILES = {"sft": "agentic_sft.jsonl", "rl": "agentic_rl.jsonl", "rl_eval": "agentic_rl_eval.jsonl"}

Pair = tuple[int, int]


def question(a: int, b: int) -> str:
    return f"{a}*{b}="


def call_text(a: int, b: int) -> str:
    arguments = json.dumps({"expression": f"{a}*{b}"}, ensure_ascii=False)
    return f'{TOOL_CALL_START}{{"name": {json.dumps(TOOL)}, "arguments": {arguments}}}{TOOL_CALL_END}'


def final_answer(a: int, b: int) -> str:
    return f"#### {a * b}"


def transcript(a: int, b: int, system: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": question(a, b)},
        {"role": "assistant", "content": call_text(a, b)},
        {"role": "tool", "content": str(a * b)},
        {"role": "assistant", "content": final_answer(a, b)},
    ]


def direct_transcript(a: int, b: int, system: str) -> list[dict[str, str]]:
    """The same question answered without a call (the tools block still shown)."""
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": question(a, b)},
        {"role": "assistant", "content": final_answer(a, b)},
    ]


def split_pairs(digits: int, n_eval: int, seed: int) -> tuple[list[Pair], list[Pair]]:
    """All `digits`-digit pairs, shuffled (seeded); `n_eval` unordered pairs (both orders) held out."""
    low, high = 10 ** (digits - 1), 10**digits
    keys = [(a, b) for a in range(low, high) for b in range(a, high)]
    random.Random(seed).shuffle(keys)
    held = keys[:n_eval]
    train = keys[n_eval:]

    def orderings(pairs: list[Pair]) -> list[Pair]:
        return [p for a, b in pairs for p in ([(a, b)] if a == b else [(a, b), (b, a)])]

    return orderings(train), orderings(held)


def agentic_rows(
    system: str,
    *,
    n_sft: int,
    n_rl: int,
    n_eval: int = 64,
    digits: int = 2,
    seed: int = 0,
    tool_fraction: float = 1.0,
) -> dict[str, list[dict[str, Any]]]:
    """Seeded rows: `sft` (n_sft transcripts, a `tool_fraction` share of them calling the tool, the rest answering
    directly), `rl` (n_rl prompts, disjoint from the SFT pairs when there are enough), `rl_eval` (held-out pairs,
    never in `sft` or `rl`, either order)."""
    if not 0.0 <= tool_fraction <= 1.0:
        raise ValueError(f"tool_fraction must be in [0, 1], got {tool_fraction}")
    train, held = split_pairs(digits, n_eval, seed)
    rng = random.Random(seed + 1)
    rng.shuffle(train)
    sft_pairs = train[:n_sft]
    rest = train[n_sft:] or train
    rl_pairs = rest[:n_rl]
    uses_tool = random.Random(seed + 2)
    return {
        "sft": [
            {"messages": (transcript if uses_tool.random() < tool_fraction else direct_transcript)(a, b, system)}
            for a, b in sft_pairs
        ],
        "rl": [{"prompt": [{"role": "user", "content": question(a, b)}], "answer": str(a * b)} for a, b in rl_pairs],
        "rl_eval": [{"prompt": [{"role": "user", "content": question(a, b)}], "answer": str(a * b)} for a, b in held],
    }


def write_agentic(out_dir: str | Path, system: str, **kwargs: Any) -> dict[str, Path]:
    """`agentic_rows` as JSONL files in `out_dir` (names: AGENTIC_FILES)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for key, rows in agentic_rows(system, **kwargs).items():
        path = out / AGENTIC_FILES[key]
        atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        paths[key] = path
    return paths

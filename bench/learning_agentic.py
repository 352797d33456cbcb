"""Does agentic GRPO teach the demo model to USE a tool? Multiplication with the `calculator`, held out.

The task (training_platform/demo/agentic.py): `37*48=` -> the model calls the calculator
(`<tool_call>{"name": "calculator", "arguments": {"expression": "37*48"}}</tool_call>`), reads its result and
answers `#### 1776`. The 0.66M-parameter demo model cannot multiply two 2-digit numbers in its head; with the tool it
only has to copy: the operands from the question into the call, the result into the answer. The SFT data mixes
tool-use transcripts (`--sft-tool-fraction`, 40%) with direct answers (`37*48=` -> `#### 1776` at once), so the start
knows how to use the tool but mostly answers in its head; GRPO, rewarded on the final answer only, has to find that
calling the tool pays. Three measurements on
the same held-out operand pairs (neither order in any training file):

- (c) the SFT start answering WITHOUT the tool: the assistant turn is prefilled with `#### `, so no call can be
  made, and greedy decoding gives the number (mental multiplication: the baseline the tool has to beat);
- (a) the SFT start WITH the tool, and (b) the model after agentic GRPO from it, both in an episode evaluated as
  verl's agent loop runs one (see `agent_episodes`): greedy turns, each hermes call parsed by our codec and run by the
  same registry tool (`training.tools.call_tool("calculator", ...)`), its result appended as a `tool` turn, until
  the model answers without a call or `max_turns`; the final answer scored by the GRPO reward (`math_answer`).

Every stage is real: `tp demo prepare`, the demo tool-use data (`write_agentic`), `tp train` for SFT (TRL) and for
agentic GRPO (`engine: verl` + `agent: {tools: [calculator]}`: verl's agent loop on a private Ray, the hf rollout).

    .venv/bin/python bench/learning_agentic.py            # SFT + GRPO -> bench/results/learning_agentic.json
    .venv/bin/python bench/learning_agentic.py --grpo-steps 0     # the SFT start alone
    .venv/bin/python bench/learning_agentic.py --sft-tool-fraction 1 --sft-steps 900  # all-tool SFT: nothing to raise
    .venv/bin/python bench/learning_agentic.py --smoke    # SFT 2 steps, 8 held-out prompts, GRPO --dry-run only

Exit code 0 whenever every stage ran (whatever the accuracies: this is a measurement, not a test); 1 when a stage
failed. Results: a table on stdout and a JSON report (`--report`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402 - the bench dir is not a package
    RESULTS_DIR,
    SMOKE_HELP,
    bench_env,
    finish_stages_report,
    fmt,
    machine_info,
    prepare_demo,
    print_table,
    read_jsonl,
    run_logged,
    smoke_report,
    tail,
    tp_command,
    train_stage,
)

TOOL = "calculator"
MAX_TURNS = 3  # the GRPO job's agent.max_turns and the evaluation's
MAX_TOOL_CALLS = 2
TOOL_TIMEOUT_S = 5.0


# ------------------------------------------------------------------------------------------------ evaluation


class _Model:
    """A saved model and its tokenizer for greedy, left-padded, batched generation."""

    def __init__(self, model_dir: Path):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        self.torch = torch
        self.tok = AutoTokenizer.from_pretrained(model_dir)
        self.tok.padding_side = "left"
        if self.tok.pad_token is None:
            self.tok.pad_token = self.tok.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        self.eos = self.tok.eos_token_id

    def render(self, messages: list[dict[str, str]], tools: list[dict[str, Any]]) -> str:
        return self.tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)

    def generate(self, texts: list[str], max_new_tokens: int, batch_size: int = 64) -> list[str]:
        """Greedy continuation of each text, up to the first eos (not included), special tokens dropped."""
        out_texts: list[str] = []
        for start in range(0, len(texts), batch_size):
            enc = self.tok(
                texts[start : start + batch_size], return_tensors="pt", padding=True, add_special_tokens=False
            )
            with self.torch.no_grad():
                out = self.model.generate(
                    **enc,
                    do_sample=False,
                    max_new_tokens=max_new_tokens,
                    eos_token_id=self.eos,
                    pad_token_id=self.tok.pad_token_id,
                )
            for ids in out[:, enc["input_ids"].shape[1] :].tolist():
                if self.eos in ids:
                    ids = ids[: ids.index(self.eos)]
                out_texts.append(self.tok.decode(ids, skip_special_tokens=True))
        return out_texts


def _operands(row: dict[str, Any]) -> str:
    return row["prompt"][-1]["content"].rstrip("=")


def _first_call(text: str, calls_so_far: int, call_tool: Any, parse: Any) -> Any:
    """The result of the first hermes block of `text`, as the agent loop gives it (verl runs
    `multi_turn.max_parallel_calls` = 1 call a turn): run by the registry when it parses as one call and the
    episode's call budget allows, else an error text (`ok=False`)."""
    from training_platform.data.tool_calls import TOOL_CALL_END, TOOL_CALL_START
    from training_platform.training.tools import ToolResult

    start = text.find(TOOL_CALL_START)
    end = text.find(TOOL_CALL_END, start)
    block = text[start:] if end < 0 else text[start : end + len(TOOL_CALL_END)]
    found = parse(block)[1] if end >= 0 else []
    if not found:
        return ToolResult(
            'error: malformed tool call: write <tool_call>{"name": NAME, "arguments": {...}}</tool_call>', False
        )
    if calls_so_far >= MAX_TOOL_CALLS:
        return ToolResult(f"error: no more tool calls in this episode (at most {MAX_TOOL_CALLS})", False)
    return call_tool(found[0]["name"], None, found[0]["arguments"], TOOL_TIMEOUT_S)


def agent_episodes(
    lm: _Model, rows: list[dict[str, Any]], *, max_new_tokens: int = 72, max_turns: int = MAX_TURNS
) -> dict[str, Any]:
    """Each held-out prompt as one greedy agent episode, the way the GRPO job's agent loop runs it (engines/verl/
    agent/loop.py): the prompt rendered with the calculator's schema (the template's tools block), the model's turn
    generated, its first hermes call parsed by `data.tool_calls.parse` and run by the registry (`call_tool`; a
    malformed block, an unknown tool, bad arguments or a call past `MAX_TOOL_CALLS` answer with an error text), the
    result appended as a `tool` turn, until a turn has no call or `max_turns` turns were generated (calls in the last
    turn are not run: the loop ends the episode there). The conversation is re-rendered with the chat template
    before each turn (the agent loop appends the tool turn's tokens to the generated ones instead: the same text);
    each turn gets `max_new_tokens` (the job's token budget over all turns is not applied). The final answer (the
    last turn without its call blocks, as the reward sees it) is scored by `math_answer`'s `score`: the GRPO
    reward itself."""
    from training_platform.data.tool_calls import parse
    from training_platform.training.rewards.math_answer import score
    from training_platform.training.tools import call_tool, tool_schema

    tools = [tool_schema(TOOL)]
    episodes: list[dict[str, Any]] = [
        {"messages": list(r["prompt"]), "calls": 0, "errors": 0, "final": "", "first_turn": None, "done": False}
        for r in rows
    ]
    for turn in range(max_turns):
        active = [e for e in episodes if not e["done"]]
        if not active:
            break
        texts = lm.generate([lm.render(e["messages"], tools) for e in active], max_new_tokens)
        for episode, text in zip(active, texts, strict=True):
            content, calls, malformed = parse(text)
            if episode["first_turn"] is None:
                episode["first_turn"] = {"text": text, "calls": calls, "malformed": malformed}
            episode["messages"].append({"role": "assistant", "content": text})
            episode["final"] = content
            if (not calls and not malformed) or turn == max_turns - 1:
                episode["done"] = True  # answered; or calls left unrun at the turn limit, as the loop cuts them
                continue
            result = _first_call(text, episode["calls"], call_tool, parse)
            episode["calls"] += 1
            episode["errors"] += not result.ok
            episode["messages"].append({"role": "tool", "content": result.text})

    correct = well_formed = exact_expression = tool_use = 0
    wrong: list[dict[str, Any]] = []
    for row, e in zip(rows, episodes, strict=True):
        first = e["first_turn"] or {"calls": [], "malformed": 0}
        good_call = len(first["calls"]) == 1 and first["calls"][0]["name"] == TOOL and not first["malformed"]
        well_formed += good_call
        tool_use += bool(first["calls"] or first["malformed"])
        exact_expression += good_call and first["calls"][0]["arguments"].get("expression") == _operands(row)
        ok = score(e["final"], row["answer"]) == 1.0
        correct += ok
        if not ok and len(wrong) < 8:
            tool_turns = [m["content"] for m in e["messages"] if m["role"] == "tool"]
            wrong.append(
                {
                    "prompt": row["prompt"][-1]["content"],
                    "answer": row["answer"],
                    "first_turn": first.get("text", "")[:160],
                    "tool_results": tool_turns[:2],
                    "final": e["final"][:80],
                }
            )
    n = len(rows)
    calls = sum(e["calls"] for e in episodes)
    errors = sum(e["errors"] for e in episodes)
    return {
        "n": n,
        "correct": correct,
        "exact_match": correct / n if n else None,
        "tool_use_rate": tool_use / n if n else None,
        "well_formed_call_rate": well_formed / n if n else None,
        "exact_expression_rate": exact_expression / n if n else None,
        "tool_calls_per_episode": calls / n if n else None,
        "tool_error_rate": errors / calls if calls else None,
        "wrong_examples": wrong,
    }


def answers_without_tool(lm: _Model, rows: list[dict[str, Any]], *, max_new_tokens: int = 8) -> dict[str, Any]:
    """The same prompts (the calculator still listed) with the assistant turn prefilled with `#### `: the model must
    write the product itself, greedily; scored by `math_answer` as above."""
    from training_platform.training.rewards.math_answer import score
    from training_platform.training.tools import tool_schema

    tools = [tool_schema(TOOL)]
    texts = lm.generate([lm.render(r["prompt"], tools) + "#### " for r in rows], max_new_tokens)
    finals = ["#### " + t for t in texts]
    correct = [score(f, r["answer"]) == 1.0 for f, r in zip(finals, rows, strict=True)]
    wrong = [
        {"prompt": r["prompt"][-1]["content"], "answer": r["answer"], "final": f}
        for f, r, ok in zip(finals, rows, correct, strict=True)
        if not ok
    ]
    n = len(rows)
    return {
        "n": n,
        "correct": sum(correct),
        "exact_match": sum(correct) / n if n else None,
        "wrong_examples": wrong[:8],
    }


def evaluate(stage: dict[str, Any], model_dir: Path, held_out: list[dict[str, Any]]) -> None:
    start = time.perf_counter()
    lm = _Model(model_dir)
    stage["held_out_with_tool"] = agent_episodes(lm, held_out)
    stage["held_out_without_tool"] = answers_without_tool(lm, held_out)
    stage["eval_seconds"] = round(time.perf_counter() - start, 2)
    w, wo = stage["held_out_with_tool"], stage["held_out_without_tool"]
    print(
        f"[{stage['stage']}] held-out exact match with the tool {w['correct']}/{w['n']} ({w['exact_match']:.1%}), "
        f"without {wo['correct']}/{wo['n']} ({wo['exact_match']:.1%}); tool used {w['tool_use_rate']:.1%}, "
        f"well-formed calls "
        f"{w['well_formed_call_rate']:.1%}, exact expressions {w['exact_expression_rate']:.1%}, tool error rate "
        f"{fmt(w['tool_error_rate'], '.1%')}",
        flush=True,
    )


# ------------------------------------------------------------------------------------------------ stages


def run_train(name: str, config: dict[str, Any], out_dir: Path, env: dict[str, str], log_dir: Path) -> dict[str, Any]:
    """One `tp train` subprocess on `config`, written next to the logs (_common.train_stage)."""
    import yaml

    config_path = log_dir / f"{name}.yaml"
    config_path.parent.mkdir(parents=True, exist_ok=True)
    config_path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    cmd = [*tp_command(), "train", str(config_path), "--output", str(out_dir)]
    return train_stage(name, cmd, out_dir, env, log_dir, CURVE_KEYS, config=config)


def dry_run(config: dict[str, Any], env: dict[str, str], log_dir: Path) -> dict[str, Any]:
    """`tp train --dry-run` of the GRPO job: validated and its verl config generated, nothing trained."""
    import yaml

    config_path = log_dir / "grpo.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    cmd = [*tp_command(), "train", str(config_path), "--dry-run"]
    print(f"[grpo, dry run] {' '.join(cmd)}", flush=True)
    rc, wall = run_logged(cmd, env, log_dir / "grpo_dry_run.log")
    result: dict[str, Any] = {"command": cmd, "exit_code": rc, "wall_seconds": round(wall, 2)}
    if rc != 0:
        result["error"] = f"tp train --dry-run exited {rc}:\n{tail(log_dir / 'grpo_dry_run.log')}"
        print(result["error"], file=sys.stderr)
    return result


CURVE_KEYS = (
    "loss",
    "mean_token_accuracy",
    "rewards/math_answer/mean",
    "agent/tool_calls/mean",
    "agent/tool_error_rate",
    "agent/malformed_calls/mean",
    "agent/cut_ratio",
)


def sft_config(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "model": {"path": "demo/model"},
        "data": {"train_file": "demo/agentic/agentic_sft.jsonl", "max_length": 512},
        "algorithm": {"name": "sft", "assistant_only_loss": True},
        "training": {
            "learning_rate": args.sft_lr,
            "lr_scheduler": "cosine",
            "warmup_ratio": 0.05,
            "max_steps": args.sft_steps,
            "per_device_batch_size": args.sft_batch,
            "logging_steps": 10,
            "save_steps": 100_000,
            "seed": args.seed,
        },
        "resources": {"device": "cpu"},
    }


def grpo_config(args: argparse.Namespace, start: str) -> dict[str, Any]:
    return {
        "engine": "verl",
        "model": {"path": start, "dtype": "fp32"},
        "data": {"train_file": "demo/agentic/agentic_rl.jsonl", "max_length": 512},
        "algorithm": {
            "name": "grpo",
            "num_generations": args.grpo_generations,
            "max_completion_length": args.grpo_max_completion,
            "temperature": args.grpo_temperature,
        },
        "rewards": [{"name": "math_answer", "weight": 1.0}],
        "agent": {"tools": [TOOL], "max_turns": MAX_TURNS, "max_tool_calls": MAX_TOOL_CALLS},
        "training": {
            "learning_rate": args.grpo_lr,
            "lr_scheduler": "constant",
            "max_steps": args.grpo_steps,
            "per_device_batch_size": args.grpo_prompts * args.grpo_generations,
            "logging_steps": 1,
            "save_steps": args.grpo_steps,
            "seed": args.seed,
        },
        "resources": {"device": "cpu"},
    }


def run(args: argparse.Namespace) -> tuple[dict[str, Any], bool]:
    """All stages; returns (report, ok). GRPO is skipped once SFT failed (it needs its model)."""
    from training_platform.data.tool_calls import tools_block
    from training_platform.demo.agentic import write_agentic
    from training_platform.training.tools import tool_schema

    data_dir = Path(args.data_dir).resolve() if args.data_dir else Path(tempfile.mkdtemp(prefix="tp-bench-agentic-"))
    log_dir = data_dir / "bench-logs"
    env = bench_env(data_dir)
    report: dict[str, Any] = {
        "bench": "learning_agentic",
        "machine": machine_info(),
        "data_dir": str(data_dir),
        "settings": {k: v for k, v in vars(args).items() if k not in ("report", "data_dir")},
        "evaluation": "greedy agent episodes re-implemented over the registry tool (agent_episodes), not verl's loop",
        "stages": [],
    }
    report["settings"]["report"] = str(args.report)
    stages = report["stages"]

    print(f"data dir: {data_dir}", flush=True)
    report["demo_prepare_seconds"] = round(prepare_demo(data_dir, log_dir), 2)
    paths = write_agentic(
        data_dir / "demo" / "agentic",
        tools_block([tool_schema(TOOL)]),
        n_sft=args.n_sft,
        n_rl=args.n_rl,
        n_eval=args.n_eval_pairs,
        seed=args.seed,
        tool_fraction=args.sft_tool_fraction,
    )
    held_out = read_jsonl(paths["rl_eval"])[: args.held_out_limit]
    report["data"] = {
        "sft_transcripts": len(read_jsonl(paths["sft"])),
        "rl_prompts": len(read_jsonl(paths["rl"])),
        "held_out_prompts": len(held_out),
    }

    runs = data_dir / "runs"
    sft = run_train("sft", sft_config(args), runs / "sft", env, log_dir)
    stages.append(sft)
    if "error" in sft:
        return report, False
    evaluate(sft, Path(sft["model"]), held_out)
    if args.grpo_dry_run:
        report["grpo_dry_run"] = dry_run(grpo_config(args, sft["model"]), env, log_dir)
        return report, report["grpo_dry_run"]["exit_code"] == 0
    if args.grpo_steps > 0:
        grpo = run_train("grpo", grpo_config(args, sft["model"]), runs / "grpo", env, log_dir)
        grpo["from"] = "sft"
        stages.append(grpo)
        if "error" in grpo:
            return report, False
        evaluate(grpo, Path(grpo["model"]), held_out)
    return report, True


def print_report(report: dict[str, Any]) -> None:
    def em(r: dict[str, Any] | None) -> str:
        return f"{r['correct']}/{r['n']} = {r['exact_match']:.1%}" if r else "-"

    rows = []
    for s in report["stages"]:
        w, wo = s.get("held_out_with_tool"), s.get("held_out_without_tool")
        rows.append([f"{s['stage']}, without the tool", str(s.get("steps", "-")), "-", em(wo), "-", "-", "-", "-"])
        rows.append(
            [
                f"{s['stage']}, with the tool",
                str(s.get("steps", "-")),
                fmt(s.get("wall_seconds"), ".0f"),
                em(w),
                fmt(w and w["tool_use_rate"], ".1%"),
                fmt(w and w["well_formed_call_rate"], ".1%"),
                fmt(w and w["exact_expression_rate"], ".1%"),
                fmt(w and w["tool_error_rate"], ".1%"),
            ]
        )
    print()
    print_table(
        [
            "model",
            "steps",
            "train wall s",
            "held-out exact match",
            "tool used",
            "well-formed call",
            "exact expression",
            "tool error rate",
        ],
        rows,
    )
    for s in report["stages"]:
        for key, v in s.get("curve", {}).items():
            print(f"{s['stage']}: {key} {v['first']:.3f} (first fifth of logs) -> {v['last']:.3f} (last fifth)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--data-dir", help="TP_DATA_DIR to build the demo in (default: a fresh temp dir)")
    p.add_argument("--seed", type=int, default=0, help="data split and training seed")
    p.add_argument("--n-sft", type=int, default=6900, help="SFT transcripts (distinct ordered operand pairs)")
    p.add_argument("--n-rl", type=int, default=1024, help="RL prompts (pairs not in the SFT file)")
    p.add_argument("--n-eval-pairs", type=int, default=64, help="held-out unordered pairs (both orders: ~2x prompts)")
    p.add_argument("--held-out-limit", type=int, default=None, help="score only the first N held-out prompts")
    p.add_argument(
        "--sft-tool-fraction",
        type=float,
        default=0.4,
        help="share of SFT transcripts that call the tool; the rest answer directly (the right product): a start "
        "that can use the tool but mostly does not (1.0: all call it, and the start is already right)",
    )
    p.add_argument("--sft-steps", type=int, default=1200)
    p.add_argument("--sft-batch", type=int, default=16)
    p.add_argument(
        "--sft-lr", type=float, default=5e-4, help="cosine, 5%% warmup (3e-3 never learns to copy: bench/README.md)"
    )
    p.add_argument("--grpo-steps", type=int, default=20, help="0 skips GRPO")
    p.add_argument("--grpo-prompts", type=int, default=8, help="prompts per step")
    p.add_argument("--grpo-generations", type=int, default=4, help="episodes per prompt")
    p.add_argument("--grpo-lr", type=float, default=2e-4, help="constant")
    p.add_argument("--grpo-temperature", type=float, default=1.0)
    p.add_argument("--grpo-max-completion", type=int, default=120, help="tokens of all turns and tool results")
    p.add_argument("--report", type=Path, default=None, help="default: bench/results/learning_agentic.json")
    p.add_argument("--keep", action="store_true", help="keep the temp data dir (runs, logs) afterwards")
    p.add_argument(
        "--smoke",
        action="store_true",
        help=SMOKE_HELP + ": SFT 2 steps, 8 held-out prompts, the GRPO job only validated (`tp train --dry-run`: "
        "verl's start-up alone takes over a minute; tests/training/test_verl_agent_rl.py runs agentic GRPO)",
    )
    p.add_argument("--grpo-dry-run", action="store_true", help="validate the GRPO job (`tp train --dry-run`) only")
    args = p.parse_args(argv)
    if not 0.0 <= args.sft_tool_fraction <= 1.0:
        p.error(f"--sft-tool-fraction: a share in [0, 1], got {args.sft_tool_fraction}")
    if args.smoke:
        args.sft_steps, args.n_sft, args.n_rl, args.held_out_limit, args.grpo_dry_run = 2, 32, 16, 8, True
        args.report = smoke_report("learning_agentic", args.report)
    elif args.report is None:
        args.report = RESULTS_DIR / "learning_agentic.json"
    return args


def main(argv: list[str] | None = None) -> int:
    return finish_stages_report(parse_args(argv), run, print_report)


if __name__ == "__main__":
    sys.exit(main())

"""The `hf` rollout server (verl's RL on any machine): concurrent requests generated in batches vs one at a time.

verl's agent loop sends one request per sample (a GRPO step of 8 prompts x 8 generations = 64 concurrent requests).
The server (`engines/verl/hf_rollout/server.py`) batches the requests that arrive together; this bench sends the
same requests to the same server in-process, all at once (batched) and one after the other (one at a time), and
reports generated tokens per second. Rounds alternate ABBA so drift on a shared machine hits both sides alike.
Sampling at temperature 1; every request's budget is `--new-tokens` (a completion may end earlier at EOS: the
tokens counted are those generated).

    .venv/bin/python bench/rollout_batching.py                       # 64 requests x 16 tokens, 4 rounds
    .venv/bin/python bench/rollout_batching.py --requests 16 --new-tokens 8
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402 - the bench dir is not a package
    RESULTS_DIR,
    SMOKE_HELP,
    machine_info,
    print_table,
    seed_demo,
    smoke_report,
    write_json,
)


async def send(server, prompts: list[list[int]], new_tokens: int, *, together: bool) -> tuple[float, int]:
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True, "max_tokens": new_tokens}
    started = time.perf_counter()
    if together:
        outs = await asyncio.gather(*[server.generate(p, dict(params), f"r{i}") for i, p in enumerate(prompts)])
    else:
        outs = [await server.generate(p, dict(params), f"r{i}") for i, p in enumerate(prompts)]
    return time.perf_counter() - started, sum(len(o.token_ids) for o in outs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=4, help="ABBA rounds (each runs both modes)")
    parser.add_argument("--report", type=Path, default=None, help="default bench/results/rollout_batching.json")
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP + ": 4 requests x 2 tokens, 1 round")
    args = parser.parse_args()
    if args.smoke:
        args.requests, args.new_tokens, args.rounds = 4, 2, 1
        args.report = smoke_report("rollout_batching", args.report)
    elif args.report is None:
        args.report = RESULTS_DIR / "rollout_batching.json"

    import torch
    from transformers import AutoTokenizer

    from training_platform.demo import prepare_demo
    from training_platform.training.engines.verl.hf_rollout.server import HFRolloutServer

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="tp_rollout_bench_") as tmp:
        seed_demo(tmp)
        prepare_demo(Path(tmp))
        model_dir = Path(tmp) / "demo" / "model"
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        prompts = [
            tokenizer.apply_chat_template(
                [{"role": "user", "content": f"{i % 20}+{(7 * i) % 20}="}],
                add_generation_prompt=True,
                tokenize=True,
                return_dict=False,
            )
            for i in range(args.requests)
        ]
        server = HFRolloutServer(str(model_dir), prompt_length=64, response_length=args.new_tokens)
        asyncio.run(send(server, prompts[:4], 2, together=True))  # warm-up, not counted
        rates: dict[str, list[float]] = {"batched": [], "one at a time": []}
        batches_per_round = []
        for r in range(args.rounds):
            order = [True, False] if r % 2 == 0 else [False, True]
            for together in order:
                before = server.stats["batches"]
                seconds, tokens = asyncio.run(send(server, prompts, args.new_tokens, together=together))
                rates["batched" if together else "one at a time"].append(tokens / seconds)
                if together:
                    batches_per_round.append(server.stats["batches"] - before)

    result: dict[str, Any] = {
        "machine": machine_info(),
        "requests": args.requests,
        "new_tokens": args.new_tokens,
        "rounds": args.rounds,
        "tokens_per_s": {k: [round(v, 1) for v in vs] for k, vs in rates.items()},
        "batches_per_batched_round": batches_per_round,
    }
    batched, single = statistics.median(rates["batched"]), statistics.median(rates["one at a time"])
    result["median_ratio_batched_over_single"] = round(batched / single, 2)
    print_table(
        ["mode", "tokens/s (median)", "rounds"],
        [
            ["batched", f"{batched:.1f}", " ".join(f"{v:.0f}" for v in rates["batched"])],
            ["one at a time", f"{single:.1f}", " ".join(f"{v:.0f}" for v in rates["one at a time"])],
        ],
    )
    print(f"batched / one at a time: {batched / single:.2f}x; server batches per batched round: {batches_per_round}")
    print(f"report: {write_json(args.report, result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

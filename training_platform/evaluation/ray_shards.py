"""Evaluation sharded over Ray actors: `run_evaluation(..., executor="ray", workers=N)`, `tp eval run --executor ray`.

    with ShardedEvaluation(config, workers=2, address="10.0.0.1:6379") as sharded:   # joins, starts the workers
        info, records = sharded.run_benchmark(bench, items, progress=False, on_progress=None)

The workers are Ray actors (`EvalWorker`), one per bundle of a SPREAD placement group: 1 GPU (and 1 CPU) each when
the cluster has GPUs (and the model is not pinned to the CPU), else 1 CPU each. Each worker acquires the code
sandbox of its node first (HumanEval fails closed there as it does locally), then loads the model once and serves
every benchmark's shards. Per benchmark the driver:

1. builds the requests as a local run does (few-shot examples drawn from the items it read);
2. asks worker 0 for the groups of requests its backend batches together (`Backend.generation_batches`) and deals
   whole groups round-robin to the workers. A shard of whole groups, kept in item order, is batched by the worker
   exactly as the one-process run batches it, so greedy decoding gives the local run's outputs token for token
   (left padding changes logits slightly: splitting items arbitrarily would not);
3. each worker generates its shard and scores it -- HumanEval's programs run in the sandbox of the node that
   generated them -- and returns the generations and score fields;
4. the driver merges them by item position, then sample index (a local run's order), builds the records with the
   local runner's own functions (steps.py) and aggregates the metrics: summary and samples equal a local run's
   (timings aside).

Log-likelihood benchmarks: worker 0 renders the prompts, the (prompt, continuation) pairs are grouped and dealt the
same way (`Backend.loglikelihood_batches`), and the driver scores the returned log-likelihoods (no code runs).

The driver reads the data files and ships the items; the model path must name the same files on every node (shared
storage, like the training launcher's run directory). An error on a worker is raised in the driver as itself (the
domain error, not Ray's wrapper); a worker that dies ends the run with the node named. Ray is imported here only
inside functions; the `openai` backend is not sharded (its model is served elsewhere).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from training_platform.core.errors import InvalidInput, PlatformError
from training_platform.core.ray_client import ClusterUnavailable, joined
from training_platform.core.settings import current_settings
from training_platform.evaluation.benchmarks import Benchmark, Item, get_benchmark
from training_platform.evaluation.config import EvalConfig
from training_platform.evaluation.generation import Backend, GenerationRequest, SamplingParams, load_backend
from training_platform.evaluation.steps import (
    ProgressCallback,
    benchmark_info,
    build_requests,
    finish_info,
    generation_info,
    generation_records,
    loglikelihood_pairs,
    loglikelihood_records,
    progress_bar,
    sampling_params,
)

__all__ = ["MAX_WORKERS", "EvalWorker", "ExecutorRefused", "ShardedEvaluation", "WorkerFailed", "deal"]

MAX_WORKERS = 64
DEFAULT_CPU_WORKERS = 2
PLACEMENT_TIMEOUT_S = 60.0  # a cluster whose CPUs / GPUs stay busy this long refuses the run
POLL_S = 0.5  # how often the driver reads the workers' progress


class ExecutorRefused(InvalidInput):
    """The Ray executor cannot run here: no or an unreachable cluster (field `executor`), or not enough room for
    the workers asked for (field `workers`). Exit 2 / 422, like any refused input."""

    def __init__(self, field: str, reason: str):
        super().__init__([(field, reason)])


class WorkerFailed(PlatformError):
    """A Ray worker died (killed, out of memory, its node lost) while the run needed it."""


def deal(groups: Sequence[Sequence[int]], workers: int) -> list[list[int]]:
    """Whole groups round-robin to `workers` shards, each shard in index order (some may be empty)."""
    shards: list[list[int]] = [[] for _ in range(workers)]
    for number, group in enumerate(groups):
        shards[number % workers].extend(group)
    return [sorted(shard) for shard in shards]


# --- the worker (a Ray actor) -----------------------------------------------------------------------------------


class EvalWorker:
    """One shard server: the benchmarks' scorers (sandbox acquired on this node) and the model, loaded once.

    A plain class made a Ray actor at run time (`ray.remote(EvalWorker)`), with two threads: one runs the work, the
    other answers `progress` while it does."""

    def __init__(self, index: int):
        self.index = index
        self.benches: dict[str, Benchmark] = {}
        self.backend: Backend | None = None
        self._lock = threading.Lock()
        self._call = -1
        self._done: dict[str, int] = {}

    def setup(self, config: EvalConfig) -> dict[str, Any]:
        """Acquire each benchmark's scorer (the sandbox: fails closed before the model loads), then the model."""
        import ray

        start = time.perf_counter()
        for spec in config.benchmarks:
            bench = get_benchmark(spec)
            bench.use_sandbox(config.sandbox)
            bench.prepare()
            self.benches[spec.name] = bench
        self.backend = load_backend(config.model, seed=config.seed)
        return {
            "model": self.backend.describe(),
            "supports_chat": self.backend.supports_chat(),
            "node": ray.util.get_node_ip_address(),
            "load_s": time.perf_counter() - start,
        }

    def _model(self) -> Backend:
        assert self.backend is not None, "setup() first"
        return self.backend

    def render(self, requests: list[GenerationRequest]) -> list[str]:
        return [self._model().render(r) for r in requests]

    def generation_batches(self, requests: list[GenerationRequest], params: SamplingParams) -> list[list[int]]:
        return self._model().generation_batches(requests, params)

    def loglikelihood_batches(self, pairs: list[tuple[str, str]]) -> list[list[int]]:
        return self._model().loglikelihood_batches(pairs)

    def generate(
        self,
        call: int,
        benchmark: str,
        items: list[Item],
        requests: list[GenerationRequest],
        params: SamplingParams,
        chat: bool,
    ) -> dict[str, Any]:
        """Generate for this shard's requests and score the outputs here. Per item: its prompt and its
        (generation, score fields) samples."""
        backend, bench = self._model(), self.benches[benchmark]
        self._begin(call, ("generate", "score"))
        prompts = [backend.render(r) for r in requests]
        start = time.perf_counter()
        generations = backend.generate(requests, params, progress=self._counter(call, "generate"))
        generate_s = time.perf_counter() - start
        flat = [(k, gen) for k, gens in enumerate(generations) for gen in gens]
        start = time.perf_counter()
        scored = bench.score_many(
            [items[k] for k, _ in flat], [gen.text for _, gen in flat], progress=self._counter(call, "score"), chat=chat
        )
        score_s = time.perf_counter() - start
        samples: list[list[tuple[Any, dict[str, Any]]]] = [[] for _ in items]
        for (k, gen), fields in zip(flat, scored, strict=True):
            samples[k].append((gen, fields))
        return {
            "prompts": prompts,
            "samples": samples,
            "run_info": bench.run_info(chat),
            "time_s": {"generate": generate_s, "score": score_s},
            "done": self.progress(call)["done"],
        }

    def loglikelihood(self, call: int, pairs: list[tuple[str, str]]) -> dict[str, Any]:
        self._begin(call, ("loglikelihood",))
        start = time.perf_counter()
        scores = self._model().loglikelihood(pairs, progress=self._counter(call, "loglikelihood"))
        return {
            "scores": scores,
            "time_s": {"generate": time.perf_counter() - start},
            "done": self.progress(call)["done"],
        }

    def _begin(self, call: int, stages: Sequence[str]) -> None:
        with self._lock:
            self._call, self._done = call, dict.fromkeys(stages, 0)

    def _counter(self, call: int, stage: str) -> Callable[[int], None]:
        def update(n: int = 1) -> None:
            with self._lock:
                if self._call == call:
                    self._done[stage] += n

        return update

    def progress(self, call: int) -> dict[str, Any]:
        """The counts of work done per stage of call `call` (empty when the worker has not begun it)."""
        with self._lock:
            return {"done": dict(self._done) if self._call == call else {}}


# --- the driver ---------------------------------------------------------------------------------------------------


class ShardedEvaluation:
    """Joins the Ray cluster (unless this process already has), starts the workers and spreads each benchmark over
    them. A context manager: leaving it stops the workers and disconnects when it connected."""

    def __init__(
        self,
        config: EvalConfig,
        *,
        workers: int | None = None,
        address: str | None = None,
        log: Callable[[str], None] | None = None,
    ):
        if config.model.backend == "openai":
            raise ExecutorRefused(
                "executor", "ray shards models loaded on the cluster (transformers, vllm); an openai endpoint is not"
            )
        if workers is not None and not 1 <= workers <= MAX_WORKERS:
            raise ExecutorRefused("workers", f"must be between 1 and {MAX_WORKERS}, got {workers}")
        path = Path(config.model.path).expanduser()
        if path.exists():  # the workers' working directory is not ours
            config = config.model_copy(update={"model": config.model.model_copy(update={"path": str(path.resolve())})})
        self.config = config
        self.requested = workers
        self.address = address
        self.log = log or (lambda message: None)
        self.workers = 0
        self.model: dict[str, Any] = {}
        self.load_s = 0.0
        self.supports_chat = False
        self._actors: list[Any] = []
        self._nodes: list[str] = []
        self._need: dict[str, float] = {}
        self._group: Any = None
        self._joined = contextlib.ExitStack()
        self._calls = itertools.count()

    # -- lifecycle

    def __enter__(self) -> ShardedEvaluation:
        self._connect()
        try:
            self._start()
        except BaseException:
            self._stop()
            raise
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._stop()

    def _connect(self) -> None:
        try:
            self._joined.enter_context(joined(self.address or current_settings().ray_address, log_to_driver=True))
        except ClusterUnavailable as exc:
            raise ExecutorRefused("executor", str(exc)) from None

    def _start(self) -> None:
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        totals = ray.cluster_resources()
        use_gpu = totals.get("GPU", 0.0) >= 1 and not self.config.model.device.startswith("cpu")
        self._need = {"CPU": 1.0, "GPU": 1.0} if use_gpu else {"CPU": 1.0}
        kind = "GPU" if use_gpu else "CPU"
        capacity = int(min(totals.get(name, 0.0) // amount for name, amount in self._need.items()))
        default = capacity if use_gpu else min(DEFAULT_CPU_WORKERS, capacity)
        workers = self.requested or max(1, min(default, MAX_WORKERS))
        if workers > capacity:
            raise ExecutorRefused(
                "workers", f"{workers} workers need {workers} {kind}s (one each); the Ray cluster has {capacity}"
            )
        self._group = placement_group([dict(self._need) for _ in range(workers)], strategy="SPREAD")
        ready, _ = ray.wait([self._group.ready()], timeout=PLACEMENT_TIMEOUT_S)
        if not ready:
            raise ExecutorRefused(
                "workers",
                f"the Ray cluster has {capacity} {kind}s but not {workers} free: none came free within "
                f"{PLACEMENT_TIMEOUT_S:g} s (other work holds them)",
            )
        remote = ray.remote(EvalWorker)
        self._actors = [
            remote.options(
                num_cpus=self._need["CPU"],
                num_gpus=self._need.get("GPU", 0.0),
                max_concurrency=2,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=self._group, placement_group_bundle_index=index
                ),
            ).remote(index)
            for index in range(workers)
        ]
        self.workers = workers
        model = self.config.model
        self.log(f"loading {model.backend} model {model.path} on {workers} Ray workers (1 {kind} each)")
        infos = self._get_all({index: actor.setup.remote(self.config) for index, actor in enumerate(self._actors)})
        self._nodes = [infos[i]["node"] for i in range(workers)]
        self.model = infos[0]["model"]
        self.supports_chat = bool(infos[0]["supports_chat"])
        self.load_s = max(info["load_s"] for info in infos.values())

    def _stop(self) -> None:
        import ray

        if ray.is_initialized():
            for actor in self._actors:
                with contextlib.suppress(Exception):
                    ray.kill(actor)
            if self._group is not None:
                from ray.util.placement_group import remove_placement_group

                with contextlib.suppress(Exception):
                    remove_placement_group(self._group)
        self._actors, self._group = [], None
        self._joined.close()  # leaves the cluster if _connect joined it

    def executor_info(self) -> dict[str, Any]:
        """summary.json's `executor`: the worker count, what each holds, and the node of each worker."""
        return {
            "name": "ray",
            "workers": self.workers,
            "resources_per_worker": {name: int(amount) for name, amount in self._need.items()},
            "nodes": list(self._nodes),
        }

    # -- calls

    def _get(self, ref: Any, worker: int) -> Any:
        """`ray.get`, raising a worker's error as itself (not Ray's wrapper) and a dead worker as WorkerFailed."""
        import ray
        from ray.exceptions import RayActorError, RayTaskError

        try:
            return ray.get(ref)
        except RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, Exception) and not isinstance(cause, RayTaskError):
                raise cause from exc
            raise
        except RayActorError as exc:
            node = self._nodes[worker] if worker < len(self._nodes) else "its node"
            reason = (str(exc).strip().splitlines() or ["no reason given"])[0]
            raise WorkerFailed(f"Ray worker {worker} on {node} died: {reason}") from exc

    def _get_all(self, refs: dict[int, Any]) -> dict[int, Any]:
        import ray

        pending = {ref: worker for worker, ref in refs.items()}
        results: dict[int, Any] = {}
        while pending:  # the first failure ends it (not the slowest worker)
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                worker = pending.pop(ref)
                results[worker] = self._get(ref, worker)
        return results

    def _run_shards(
        self,
        benchmark: str,
        method: str,
        shards: dict[int, tuple[Any, ...]],
        totals: dict[int, dict[str, int]],
        progress: bool,
        on_progress: ProgressCallback | None,
    ) -> dict[int, dict[str, Any]]:
        """Call `method(call, *args)` on each worker of `shards`; while they run, report progress per stage (the
        sums, as a local run's events) and per worker (events with `worker`). Returns each worker's result."""
        import ray

        call = next(self._calls)
        refs = {getattr(self._actors[w], method).remote(call, *args): w for w, args in shards.items()}
        stages = list(dict.fromkeys(stage for per in totals.values() for stage in per))
        seen = {w: dict.fromkeys(stages, 0) for w in shards}
        watch = progress or on_progress is not None
        results: dict[int, dict[str, Any]] = {}
        with contextlib.ExitStack() as stack:
            updates = {
                stage: stack.enter_context(
                    progress_bar(
                        sum(per.get(stage, 0) for per in totals.values()),
                        f"{benchmark}: {stage}",
                        progress,
                        on_progress,
                        {"benchmark": benchmark, "stage": stage},
                    )
                )
                for stage in stages
            }

            def report(worker: int, done: dict[str, int], first: bool = False) -> None:
                for stage, count in done.items():
                    delta = count - seen[worker].get(stage, 0)
                    if delta <= 0 and not first:
                        continue
                    seen[worker][stage] = count
                    update = updates.get(stage)
                    if update is not None and delta > 0:
                        update(delta)
                    if on_progress is not None:
                        total = totals[worker].get(stage, 0)
                        on_progress(
                            {"benchmark": benchmark, "stage": stage, "worker": worker, "done": count, "total": total}
                        )

            for w in shards:
                report(w, dict.fromkeys(totals[w], 0), first=True)
            pending = dict(refs)
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S if watch else None)
                for ref in ready:
                    w = pending.pop(ref)
                    results[w] = self._get(ref, w)
                    report(w, results[w]["done"])
                if watch and pending:
                    polls = {w: self._actors[w].progress.remote(call) for w in pending.values()}
                    for w, poll in polls.items():
                        try:
                            state = ray.get(poll, timeout=POLL_S * 4)
                        except Exception:  # noqa: BLE001 - a worker's failure is reported by its own call
                            continue
                        report(w, state["done"])
        return results

    # -- a benchmark

    def run_benchmark(
        self, bench: Benchmark, items: list[Item], *, progress: bool, on_progress: ProgressCallback | None
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The benchmark's summary entry and its records, as `runner._run_benchmark` makes them."""
        spec = bench.spec
        chat, requests = build_requests(bench, items, self.supports_chat)
        info = benchmark_info(bench, items, chat)
        timing: dict[str, float] = {}
        if bench.kind == "loglikelihood":
            prompts = self._get(self._actors[0].render.remote(requests), 0)
            pairs, spans = loglikelihood_pairs(bench, items, prompts)
            groups = self._get(self._actors[0].loglikelihood_batches.remote(pairs), 0)
            shards = {w: shard for w, shard in enumerate(deal(groups, self.workers)) if shard}
            start = time.perf_counter()
            results = self._run_shards(
                spec.name,
                "loglikelihood",
                {w: ([pairs[i] for i in shard],) for w, shard in shards.items()},
                {w: {"loglikelihood": len(shard)} for w, shard in shards.items()},
                progress,
                on_progress,
            )
            timing["generate"] = time.perf_counter() - start
            scores: list[Any] = [None] * len(pairs)
            for w, shard in shards.items():
                for i, score in zip(shard, results[w]["scores"], strict=True):
                    scores[i] = score
            per_item = timing["generate"] / max(1, len(items))
            records = loglikelihood_records(bench, items, prompts, spans, scores, per_item)
            info["n_samples"] = 1
        else:
            params = sampling_params(bench, chat, self.config)
            groups = self._get(self._actors[0].generation_batches.remote(requests, params), 0)
            shards = {w: shard for w, shard in enumerate(deal(groups, self.workers)) if shard}
            results = self._run_shards(
                spec.name,
                "generate",
                {
                    w: (spec.name, [items[i] for i in shard], [requests[i] for i in shard], params, chat)
                    for w, shard in shards.items()
                },
                {w: {"generate": len(shard), "score": len(shard) * params.n} for w, shard in shards.items()},
                progress,
                on_progress,
            )
            prompts = [""] * len(items)
            samples: list[list[tuple[Any, dict[str, Any]]]] = [[] for _ in items]
            for w, shard in shards.items():
                for position, prompt, item_samples in zip(
                    shard, results[w]["prompts"], results[w]["samples"], strict=True
                ):
                    prompts[position], samples[position] = prompt, item_samples
            flat = [
                (item, prompt, j, gen)
                for item, prompt, item_samples in zip(items, prompts, samples, strict=True)
                for j, (gen, _) in enumerate(item_samples)
            ]
            scored_rows = [fields for item_samples in samples for _, fields in item_samples]
            records = generation_records(bench, flat, scored_rows)
            for stage in ("generate", "score"):
                timing[stage] = max(result["time_s"][stage] for result in results.values())
            info.update(generation_info(bench, params))
            info.update(_merged_run_info([results[w]["run_info"] for w in sorted(results)]))
        finish_info(bench, info, records, timing)
        return info, records


def _merged_run_info(infos: list[dict[str, Any]]) -> dict[str, Any]:
    """The workers' benchmark facts (e.g. HumanEval's isolation): one value where they agree, else the distinct
    values joined ("bwrap, unsandboxed")."""
    merged: dict[str, Any] = {}
    for key in dict.fromkeys(k for info in infos for k in info):
        values = list(dict.fromkeys(str(info[key]) if key in info else "" for info in infos))
        first = next(info[key] for info in infos if key in info)
        merged[key] = first if len(values) == 1 else ", ".join(v for v in values if v)
    return merged

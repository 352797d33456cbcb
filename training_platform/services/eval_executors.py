"""Where an evaluation runs (`executor`: auto | local | ray): the choice at submit and at a schedule's firing, and
the counting of a request's items that `auto` weighs against TP_RAY_MIN_ROWS. Split from services/evaluations.py
(which re-exports these names).

- `resolve_executor`: where it runs (`executor` auto | local | ray of the request): "auto" made concrete at
  submission (ray when the platform has a Ray cluster and the benchmarks hold more than TP_RAY_MIN_ROWS items, or
  for a schedule firing on a checkpoint of a job trained on the cluster), ray refused naming `executor` when there
  is no cluster or it does not answer.
- `record_worker_progress`: the Ray executor's per-worker progress, on the evaluation row while it runs.
"""

from __future__ import annotations

import gzip
import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sqlmodel import Session

from training_platform.core.settings import Settings
from training_platform.db.models import Evaluation, Job
from training_platform.evaluation.config import EvalConfig
from training_platform.evaluation.request import EvalRequest

log = logging.getLogger("training_platform.evaluations")


@dataclass
class ExecutorChoice:
    """Where an evaluation runs, as its job's config records it (`executor`)."""

    name: str  # local | ray
    workers: int | None  # ray: the actors asked for (None: the cluster's default when it runs); local: None
    requested: str  # what the request said: auto | local | ray
    reason: str  # why (auto's decision), shown with it

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def choose_executor(
    requested: str,
    *,
    ray_address: str | None,
    items: int | None,
    min_rows: int,
    launcher: str | None = None,
    openai: bool = False,
) -> tuple[str, str]:
    """(local | ray, why). "auto": ray when the platform has a cluster and either the benchmarks hold more than
    `min_rows` items or the model is a checkpoint of a job the cluster trained (`launcher` "ray"); else local. An
    explicit choice is kept (checked by `resolve_executor`)."""
    if requested != "auto":
        return requested, "asked for"
    if openai:
        return "local", "auto: an endpoint serves the model (nothing to shard on the cluster)"
    if not ray_address:
        return "local", "auto: the platform has no Ray cluster (TP_RAY_ADDRESS)"
    if launcher == "ray":
        return "ray", "auto: the checkpoint's training job ran on the Ray cluster"
    if items is not None and items > min_rows:
        return "ray", f"auto: more than {min_rows} items (TP_RAY_MIN_ROWS)"
    shown_items = "?" if items is None else str(items)
    return "local", f"auto: {shown_items} items, not more than {min_rows} (TP_RAY_MIN_ROWS)"


def count_items(config: EvalConfig, *, stop_after: int) -> int:
    """The items the benchmarks hold, as cheaply as known: each data file's rows (non-blank JSONL lines, a JSON
    list's length) capped by the benchmark's `limit`; counting stops once the total exceeds `stop_after`. A file
    that cannot be read counts 0 (the worker's preflight reports it); one too big to count within COUNT_BYTES
    counts as many as the cap (it is large)."""
    from training_platform.evaluation.benchmarks import EvalDataError, get_benchmark

    total = 0
    for spec in config.benchmarks:
        cap = stop_after + 1 - total
        if spec.limit:
            cap = min(cap, spec.limit)
        if cap <= 0:
            break
        try:
            path = get_benchmark(spec).data_path()
        except (EvalDataError, ValueError):
            continue
        total += _count_rows(path, cap)
    return total


COUNT_BYTES = 256 * 2**20  # what counting one data file reads at most (decompressed)
_LINE_PIECE = 2**20


def _count_rows(path: Path, cap: int) -> int:
    gz = path.suffix == ".gz"
    inner = Path(path.stem).suffix if gz else path.suffix
    try:
        if not path.is_file():  # not a device or a pipe: a count never blocks or runs forever
            return 0
        with gzip.open(path, "rb") if gz else path.open("rb") as f:
            if inner == ".json":
                text = f.read(COUNT_BYTES + 1)
                if len(text) > COUNT_BYTES:
                    return cap
                data = json.loads(text)
                return min(cap, len(data)) if isinstance(data, list) else 0
            n, read, line_start = 0, 0, True
            while n < cap:
                piece = f.readline(_LINE_PIECE)  # long lines in pieces: memory stays bounded
                if not piece:
                    break
                read += len(piece)
                if read > COUNT_BYTES:
                    return cap
                if line_start and piece.strip():
                    n += 1
                line_start = piece.endswith(b"\n")
            return n
    except (OSError, ValueError, EOFError):
        return 0


def job_launcher(job: Job | None) -> str | None:
    """How a training job's ranks were started (its config's `resources.launcher`, "auto" made concrete)."""
    if job is None or job.kind != "train":
        return None
    from training_platform.training.config import resolve_launcher

    section = (job.config or {}).get("resources")
    resources: dict[str, Any] = section if isinstance(section, dict) else {}
    try:
        return resolve_launcher(
            str(resources.get("launcher") or "auto"),
            num_nodes=int(resources.get("num_nodes") or 1),
            num_devices=int(resources.get("num_devices") or 1),
        )
    except (TypeError, ValueError):
        return None


def resolve_executor(
    request: EvalRequest,
    config: EvalConfig,
    settings: Settings,
    *,
    launcher: str | None = None,
    fall_back: bool = False,
) -> tuple[ExecutorChoice | None, list[tuple[str, str]]]:
    """The executor the evaluation runs on, or the problems (field `executor` / `workers`): ray with no cluster
    (TP_RAY_ADDRESS unset), one whose address does not accept a connection, or an openai endpoint's model; more
    than one worker on the local executor. `launcher`: the training job's whose checkpoint is evaluated (a
    schedule firing). `fall_back`: "auto" runs locally when the cluster it chose does not answer (nobody is there
    to read a refusal: a schedule firing); else that is refused too."""
    address = (settings.ray_address or "").strip() or None
    openai = config.model.backend == "openai"
    requested = request.executor
    errors: list[tuple[str, str]] = []
    if requested == "local" and request.workers not in (None, 1):
        errors.append(("workers", "the local executor runs one worker; shard over more with executor ray"))
    items = None
    if requested == "auto" and address and not openai and launcher != "ray":
        items = count_items(config, stop_after=settings.ray_min_rows)
    name, reason = choose_executor(
        requested, ray_address=address, items=items, min_rows=settings.ray_min_rows, launcher=launcher, openai=openai
    )
    if name == "ray":
        problem = ray_problem(address, openai)
        if problem is not None and requested == "auto" and fall_back:
            name, reason = "local", f"{reason}, but {problem}: ran locally"
        elif problem is not None:
            chose = "" if requested == "ray" else f" ({reason}; ask for executor local to run without it)"
            errors.append(("executor", problem + chose))
    if errors:
        return None, errors
    workers = request.workers if name == "ray" else None
    return ExecutorChoice(name=name, workers=workers, requested=requested, reason=reason), []


def ray_problem(address: str | None, openai: bool) -> str | None:
    """Why the Ray executor cannot run this evaluation now (None: it can): the model is an endpoint's, there is no
    cluster, or its address does not accept a connection (data/executors/ray_data.py: `check_reachable`)."""
    if openai:
        return (
            "ray shards models loaded on the cluster (transformers, vllm); an endpoint's model is served "
            "elsewhere: use executor local"
        )
    if not address:
        return "ray needs a Ray cluster and the platform has none (the operator sets TP_RAY_ADDRESS)"
    from training_platform.data.executors import ExecutorError
    from training_platform.data.executors.ray_data import check_reachable

    try:
        check_reachable(address)
    except ExecutorError as exc:
        return str(exc).removeprefix("executor: ")
    return None


# ---------------------------------------------------------------------------------------------- creating


def record_worker_progress(session: Session, job_id: int, executor: dict[str, Any] | None) -> None:
    """The Ray executor's progress per worker while the evaluation runs: the evaluations row's `summary` holds
    {"executor": {"name": "ray", "progress": [{"worker", "benchmark", "stage", "done", "total"}, ...]}} until
    the finished run's summary replaces it (a failed run keeps the last one). None: cleared (a run starting)."""
    evaluation = session.get(Evaluation, job_id)
    if evaluation is not None:
        evaluation.summary = {"executor": executor} if executor is not None else None
        session.add(evaluation)

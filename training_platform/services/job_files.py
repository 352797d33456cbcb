"""The files a job leaves under TP_DATA_DIR, and their removal when the job is deleted.

A job's files (see workers/supervisor.py and workers/eval_tasks.py):

    runs/job-N/                 the run directory (checkpoints, final model, metrics, logs, pins of its checkpoints)
    runs/job-N.attempt-K/       earlier attempts' run directories moved aside (they had nothing to resume from)
    runs/job-N.config.yaml      the effective config the worker wrote
    runs/job-N.console.log      the training process's stdout/stderr
    runs/job-N.lock             the run directory's flock
    runs/job-N.gates/           the preflight's quality-gate report (and override) handed to the training process
    evals/job-N/                an evaluation's output (summary, samples, reports, eval.log)
    job.run_dir                 wherever the database says the run is (normally one of the above)

Retention rule (DELETE /api/v1/jobs/{id}): all of it is removed, except
- a directory a registered model points into (e.g. a model registered from `runs/job-N/final` or from one of its
  checkpoints): that directory is kept so the model keeps working; the rest of the run goes;
- anything outside TP_DATA_DIR, or reached through a symlink: never touched (the platform did not create it).
"""

from __future__ import annotations

import contextlib
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Removal:
    removed: list[str] = field(default_factory=list)  # paths relative to the data dir
    kept: list[tuple[str, str]] = field(default_factory=list)  # (relative path, why)


def job_paths(job_id: int, data_dir: Path, run_dir: str | None = None) -> list[Path]:
    """Every top-level file or directory of job `job_id` that exists (run_dir included when it is set)."""
    runs = data_dir / "runs"
    candidates = [runs / f"job-{job_id}", data_dir / "evals" / f"job-{job_id}"]
    candidates += [runs / f"job-{job_id}.{suffix}" for suffix in ("config.yaml", "console.log", "lock", "gates")]
    if runs.is_dir():
        attempt = re.compile(rf"job-{job_id}\.attempt-\d+")
        candidates += sorted(p for p in runs.iterdir() if attempt.fullmatch(p.name))
    if run_dir:
        candidates.append(Path(run_dir))
    out: list[Path] = []
    for path in candidates:
        if (path.exists() or path.is_symlink()) and path not in out:
            out.append(path)
    return out


def _relative(path: Path, data_dir: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(path.relative_to(data_dir))
    return path.name


def remove_job_files(
    job_id: int, data_dir: Path, *, run_dir: str | None = None, keep: dict[Path, str] | None = None
) -> Removal:
    """Remove job `job_id`'s files under `data_dir` (resolved), except the directories in `keep` ({resolved path:
    why}, e.g. registered models) and what lies outside `data_dir` or behind a symlink."""
    data_dir = data_dir.resolve()
    keep = {p: why for p, why in (keep or {}).items()}
    result = Removal()
    for path in job_paths(job_id, data_dir, run_dir):
        if path.is_symlink():
            result.kept.append((_relative(path, data_dir), "a symlink (its target is not the platform's)"))
            continue
        try:
            resolved = path.resolve()
        except OSError:
            continue
        if resolved == data_dir or not resolved.is_relative_to(data_dir):
            result.kept.append((path.name, "outside the data directory"))
            continue
        _remove_except(resolved, keep, data_dir, result)
    return result


def _remove_except(path: Path, keep: dict[Path, str], data_dir: Path, result: Removal) -> None:
    for kept, why in keep.items():
        if path == kept or path.is_relative_to(kept):
            result.kept.append((_relative(path, data_dir), why))
            return
    inner = [k for k in keep if k.is_relative_to(path)]
    if inner and path.is_dir() and not path.is_symlink():
        for child in sorted(path.iterdir()):
            if child.is_symlink():
                child.unlink(missing_ok=True)
                continue
            _remove_except(child, keep, data_dir, result)
        return
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
    if not path.exists():
        result.removed.append(_relative(path, data_dir))

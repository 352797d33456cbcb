"""Checkpoints a job's runs recorded (rotated ones stay listed with `removed: true`), with the evaluation results
attached to each, and the job's best checkpoint by any evaluated metric."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from sqlmodel import col, select

from training_platform.api import schemas
from training_platform.api.deps import SessionDep, VisibleJob
from training_platform.api.errors import ValidationFailed, not_found
from training_platform.db.models import Checkpoint, row_id
from training_platform.services import evaluations as eval_service

router = APIRouter(prefix="/jobs", tags=["checkpoints"])


@router.get("/{job_id}/checkpoints", response_model=list[schemas.CheckpointRead])
def job_checkpoints(job: VisibleJob, session: SessionDep):
    results = eval_service.checkpoint_results(session, row_id(job))
    best_step = (job.best_checkpoint or {}).get("step")
    out = []
    for ckpt in session.exec(
        select(Checkpoint).where(Checkpoint.job_id == job.id).order_by(col(Checkpoint.step))
    ).all():
        result = results.get(ckpt.step) or {}
        out.append(
            {
                **ckpt.model_dump(),
                "evaluation_id": result.get("evaluation_id"),
                "eval_metrics": result.get("metrics") or {},
                "is_best": ckpt.step == best_step,
            }
        )
    return out


@router.get("/{job_id}/best_checkpoint")
def best_checkpoint(
    job: VisibleJob,
    session: SessionDep,
    metric: Annotated[
        str | None,
        Query(max_length=130, description='e.g. "gsm8k/accuracy"; default: the metric the job keeps its best by.'),
    ] = None,
):
    """The checkpoint with the highest value of `metric` among the job's evaluated, still existing checkpoints
    (the earliest step wins a tie)."""
    if metric is None:
        if not job.best_checkpoint:
            raise not_found(f"best checkpoint of job {job.id} (no schedule keeps one: pass ?metric=)")
        return job.best_checkpoint
    try:
        best = eval_service.best_checkpoint(session, row_id(job), metric)
    except ValueError as exc:
        raise ValidationFailed([("query.metric", str(exc))]) from None
    if best is None:
        raise not_found(f"an evaluated checkpoint of job {job.id} with {metric}")
    return best

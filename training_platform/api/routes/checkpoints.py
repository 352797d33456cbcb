"""Checkpoints a job's runs recorded (rotated ones stay listed with `removed: true`)."""

from __future__ import annotations

from fastapi import APIRouter
from sqlmodel import select

from training_platform.api import schemas
from training_platform.api.deps import SessionDep, VisibleJob
from training_platform.db.models import Checkpoint

router = APIRouter(prefix="/jobs", tags=["checkpoints"])


@router.get("/{job_id}/checkpoints", response_model=list[schemas.CheckpointRead])
def job_checkpoints(job: VisibleJob, session: SessionDep):
    return session.exec(select(Checkpoint).where(Checkpoint.job_id == job.id).order_by(Checkpoint.step)).all()

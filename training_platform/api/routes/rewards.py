"""Reward shadow tests over the API: `POST /rewards/shadow` queues a `data` job that scores the same sample with an
old and a new reward scorer (training/rewards/shadow.py); the report lands in the job's `config.result`."""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, status
from pydantic import Field, StringConstraints, model_validator

from training_platform.api import schemas
from training_platform.api.deps import CurrentUser, JsonBody, SessionDep, SettingsDep
from training_platform.api.errors import ValidationFailed
from training_platform.core.path_policy import check_path, resolve_path
from training_platform.db import crud
from training_platform.db.models import row_id
from training_platform.services.access import reader_for
from training_platform.training.rewards import shadow
from training_platform.training.rewards.shadow import SHADOW_OPERATION

log = logging.getLogger("training_platform.api.rewards")
router = APIRouter(prefix="/rewards", tags=["rewards"])

Spec = (
    Annotated[str, StringConstraints(min_length=1, max_length=10_000)]
    | dict[str, Any]
    | Annotated[list[dict[str, Any]], Field(min_length=1, max_length=32)]
)


class ShadowCreate(schemas.RequestBody):
    old: Spec = Field(
        description="The current scorer: a reward name, `name:key=value,...`, {name, params} or a "
        "list of {name, weight, params}."
    )
    new: Spec = Field(description="The changed scorer (same forms).")
    dataset_id: schemas.BodyId | None = Field(None, description="With version_id: a stored dataset version.")
    version_id: schemas.BodyId | None = None
    path: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=4096)] | None = Field(
        None, description="Or a file on the server inside the allowed directories."
    )
    limit: int = Field(500, ge=1, le=shadow.MAX_LIMIT)
    repeats: int = Field(3, ge=1, le=shadow.MAX_REPEATS)
    top_k: int = Field(10, ge=1, le=shadow.MAX_TOP_K)
    seed: int = Field(0, ge=0, le=2**32 - 1)
    min_spearman: float = Field(0.8, ge=-1, le=1)
    max_unstable_share: float = Field(0.0, ge=0, le=1)
    name: Annotated[str, StringConstraints(max_length=200)] | None = None
    priority: schemas.Priority = 0

    @model_validator(mode="after")
    def _one_source(self) -> ShadowCreate:
        by_version = self.dataset_id is not None or self.version_id is not None
        if by_version == (self.path is not None):
            raise ValueError("give dataset_id + version_id, or path (one of the two)")
        if by_version and (self.dataset_id is None or self.version_id is None):
            raise ValueError("dataset_id and version_id go together")
        return self


def _check_specs(body: ShadowCreate) -> list[tuple[str, str]]:
    errors: list[tuple[str, str]] = []
    for field in ("old", "new"):
        spec = getattr(body, field)
        if isinstance(spec, str) and spec.strip().endswith((".yaml", ".yml", ".json")):
            errors.append((field, "give the reward section itself over the API, not a file name"))
            continue
        try:
            shadow.Scorer(spec, field)
        except shadow.ShadowInputError as exc:
            errors.extend(exc.errors)
    return errors


@router.post(
    "/shadow",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=schemas.JobSubmitted,
    dependencies=[JsonBody],
    responses={
        404: {"model": schemas.ErrorOut, "description": "No such dataset or version, or another user's"},
        422: {"model": schemas.ErrorOut, "description": "Every problem with the scorers or data"},
    },
)
def create_shadow(body: ShadowCreate, session: SessionDep, user: CurrentUser, settings: SettingsDep):
    """Queue a shadow test as a `data` job: both scorers score the same seeded sample (`limit` rows, `repeats`
    calls each). Once succeeded, the job's `config.result` is the report: spearman, kendall, top_k_overlap,
    per-scorer stability (mean per-item variance, share of items with variance > 0.08) and `verdict` pass/fail."""
    from training_platform.api.routes.datasets import _version_of, _visible_dataset
    from training_platform.api.routes.jobs import job_read, wake

    errors = _check_specs(body)
    source: dict[str, Any]
    if body.path is not None:
        problem = check_path("path", body.path, settings, reader_for(session, user))
        if problem is not None:
            errors.append((problem.path, problem.reason))
        elif not resolve_path(body.path, settings).is_file():
            errors.append(("path", f"no such file: {body.path}"))
        source = {"path": body.path}
    else:
        # ShadowCreate's validator: without a path, dataset_id and version_id are both given
        assert body.dataset_id is not None and body.version_id is not None
        dataset = _visible_dataset(session, user, body.dataset_id)
        _version_of(session, dataset, body.version_id)
        source = {"dataset_id": body.dataset_id, "version_id": body.version_id}
    if errors:
        raise ValidationFailed(errors)
    params = body.model_dump(
        include={"old", "new", "limit", "repeats", "top_k", "seed", "min_spearman", "max_unstable_share"}
    )
    config = {"operation": SHADOW_OPERATION, **source, "params": params}
    job = crud.create_job(
        session, owner=user, name=body.name or "reward shadow test", config=config, priority=body.priority, kind="data"
    )
    job.algorithm = SHADOW_OPERATION
    job.max_steps = 100  # progress in percent
    session.add(job)
    session.commit()
    log.info("data job %s: reward shadow test by %s", job.id, user.name)
    return job_read(session, job, user.name, warning=wake("data", body.priority, row_id(job)))

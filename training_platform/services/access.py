"""Who may see and read what, from the database: the visibility of registered models and datasets (their SQL forms
for listings) and `UserReader` (core/path_policy.py's `Reader` protocol), which answers the ownership questions of
the path areas with cached lookups. The API (at submission) and the workers (before opening anything) use the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import or_
from sqlmodel import Session, col, select

from training_platform.core.path_policy import inside_allowed_roots, resolve_path
from training_platform.core.settings import Settings
from training_platform.db.models import Dataset, DatasetVersionRecord, Job, RegisteredModel, User

# ---------------------------------------------------------------------------------------------- visibility


def model_visible(user: User, model: RegisteredModel) -> bool:
    return user.is_admin or model.owner_id is None or model.owner_id == user.id or bool(model.shared)


def model_visible_clause(user: User):
    owner_id = col(RegisteredModel.owner_id)
    return or_(owner_id == user.id, owner_id.is_(None), col(RegisteredModel.shared) == True)  # noqa: E712 - SQL


def dataset_visible(user: User, dataset: Dataset) -> bool:
    return user.is_admin or dataset.owner_id == user.id or bool(dataset.shared)


def dataset_visible_clause(user: User):
    return or_(col(Dataset.owner_id) == user.id, col(Dataset.shared) == True)  # noqa: E712 - SQL


def visible_model_by_name(session: Session, user: User, name: str) -> RegisteredModel | None:
    model = session.exec(select(RegisteredModel).where(RegisteredModel.name == name)).first()
    return model if model is not None and model_visible(user, model) else None


# ---------------------------------------------------------------------------------------------- the reader


@dataclass
class UserReader:
    """Who reads: a user, with database lookups for the areas that depend on ownership (cached per instance)."""

    user: User
    session: Session
    _jobs: dict[int, bool] = field(default_factory=dict)
    _shas: dict[str, bool] = field(default_factory=dict)
    _models: list[Path] | None = None
    _run_dirs: list[Path] | None = None

    @property
    def user_name(self) -> str:
        return self.user.name or ""

    @property
    def is_admin(self) -> bool:
        return bool(self.user.is_admin)

    def owns_job(self, job_id: int) -> bool:
        if job_id not in self._jobs:
            job = self.session.get(Job, job_id) if job_id < 2**63 else None
            self._jobs[job_id] = job is not None and job.owner_id == self.user.id
        return self._jobs[job_id]

    def can_read_content(self, sha256: str) -> bool:
        if sha256 not in self._shas:
            row = self.session.exec(
                select(DatasetVersionRecord.id)
                .join(Dataset, col(Dataset.id) == DatasetVersionRecord.dataset_id)
                .where(DatasetVersionRecord.sha256 == sha256, dataset_visible_clause(self.user))
                .limit(1)
            ).first()
            self._shas[sha256] = row is not None
        return self._shas[sha256]

    def model_dirs(self, settings: Settings) -> list[Path]:
        if self._models is None:
            rows = self.session.exec(select(RegisteredModel.path).where(model_visible_clause(self.user))).all()
            self._models = []
            for path in rows:
                try:
                    self._models.append(resolve_path(path, settings))
                except (OSError, RuntimeError):
                    continue
        return self._models

    def run_dirs(self, settings: Settings) -> list[Path]:
        """The directories the workers recorded for this user's jobs (`runs/job-N`, `evals/job-N` normally)."""
        if self._run_dirs is None:
            rows = self.session.exec(
                select(Job.run_dir).where(Job.owner_id == self.user.id, col(Job.run_dir).is_not(None))
            ).all()
            self._run_dirs = []
            for path in rows:
                if path is None:  # excluded by the query
                    continue
                try:
                    resolved = resolve_path(path, settings)
                except (OSError, RuntimeError):
                    continue
                if inside_allowed_roots(resolved, settings) and resolved != settings.data_path:
                    self._run_dirs.append(resolved)
        return self._run_dirs


def reader_for(session: Session, user: User) -> UserReader:
    return UserReader(user=user, session=session)


def reader_for_owner(session: Session, owner_id: int) -> UserReader | None:
    """The reader for a job's owner (the workers' re-check); None when the user no longer exists."""
    user = session.get(User, owner_id)
    return None if user is None else UserReader(user=user, session=session)

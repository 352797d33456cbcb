"""The jobs list as a runs table: the owner's tags and note of a job, the tag filter, and the last logged value of a
few metrics for a whole page of jobs at once."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from sqlalchemy import ColumnElement, Select, bindparam, cast, exists, func, select
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import aliased
from sqlmodel import Session, col

from training_platform.db.models import Job, MetricPoint


def has_tag(dialect: str, tag: str) -> ColumnElement[bool]:
    """Jobs whose `tags` hold `tag`, exactly (case-sensitive, whole tags): jsonb containment on PostgreSQL (the
    column is `json`, cast), `json_each` on SQLite. A LIKE on the stored text would be case-insensitive on SQLite."""
    if dialect == "postgresql":
        return cast(Job.tags, JSONB).contains([tag])
    each = func.json_each(Job.tags).table_valued("value")
    return exists().select_from(each).where(each.c.value == tag)


def set_labels(session: Session, job: Job, *, tags: list[str] | None = None, note: str | None = None) -> list[str]:
    """Set the given ones of the job's tags and note (None: unchanged); returns the names of the fields that
    changed. Only these columns are written (a worker updating the job meanwhile keeps its own columns) and
    `updated_at` stays: it dates state changes (the recovery sweep reads it)."""
    changed = []
    if tags is not None and tags != job.tags:
        job.tags = list(tags)
        changed.append("tags")
    if note is not None and note != job.note:
        job.note = note
        changed.append("note")
    if changed:
        session.add(job)
    return changed


def last_points(
    session: Session, job_ids: Sequence[int], names: Sequence[str]
) -> dict[int, dict[str, tuple[int, float]]]:
    """{job id: {name: (step, value)}}: each metric's point at its highest step, for every job and name that has
    one. One statement for all the jobs: per job and name, two `ORDER BY step DESC LIMIT 1` probes of the
    (job_id, name, step) unique index, however long the run."""
    if not job_ids or not names:
        return {}
    rows = session.execute(_last_points_statement(tuple(names)), {"ids": list(job_ids)}).all()
    out: dict[int, dict[str, tuple[int, float]]] = {}
    for row in rows:
        found = {}
        for i, name in enumerate(names):
            step, value = row[1 + 2 * i], row[2 + 2 * i]
            if step is not None and value is not None:
                found[name] = (int(step), float(value))
        out[row[0]] = found
    return out


@lru_cache(maxsize=8)
def _last_points_statement(names: tuple[str, ...]) -> Select:
    """Built once per set of names (the listing asks for the same ones on every request): the job ids are bound."""
    columns = []
    for i, name in enumerate(names):
        point = aliased(MetricPoint)
        for label, column in ((f"s{i}", col(point.step)), (f"v{i}", col(point.value))):
            latest = (
                select(column)
                .where(col(point.job_id) == Job.id, col(point.name) == name)
                .order_by(col(point.step).desc())
                .limit(1)
            )
            columns.append(latest.scalar_subquery().label(label))
    return select(col(Job.id), *columns).where(col(Job.id).in_(bindparam("ids", expanding=True)))

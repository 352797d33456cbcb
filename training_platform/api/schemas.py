"""Request and response models of the REST API (Create / Read / Update per resource).

Request bodies forbid unknown keys and use strict integers, so a typo or a `"priority": "high"` is a clear 422
instead of a silently ignored or coerced value.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Generic, Literal, TypeVar, overload

from fastapi import Path, Query
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

T = TypeVar("T")


@overload
def as_utc(value: datetime) -> datetime: ...
@overload
def as_utc(value: None) -> None: ...
def as_utc(value: datetime | None) -> datetime | None:
    """SQLite (and `timestamp without time zone` columns) return naive datetimes; they are stored in UTC."""
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


UtcDatetime = Annotated[datetime, AfterValidator(as_utc)]

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"

# Ids, offsets and counts fit PostgreSQL's INTEGER (SQLite's is wider): a larger value is a 422 naming the
# parameter, never an overflow in the driver.
DB_INT_MAX = 2**31 - 1


def id_path(description: str | None = None) -> Any:
    return Path(ge=1, le=DB_INT_MAX, description=description)


def id_query(description: str | None = None) -> Any:
    return Query(ge=1, le=DB_INT_MAX, description=description)


DbId = Annotated[int, id_path()]
Offset = Annotated[int, Query(ge=0, le=DB_INT_MAX, description="Items to skip.")]
BodyId = Annotated[int, Field(ge=1, le=DB_INT_MAX, strict=True)]
Priority = Annotated[int, Field(ge=-1000, le=1000, strict=True, description="Higher runs sooner.")]
JobName = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]


class RequestBody(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorItem(BaseModel):
    loc: str = Field(description="Field path, e.g. `algorithm.num_generations`, `name` or `query.limit`.")
    msg: str


class ErrorOut(BaseModel):
    detail: str | list[ErrorItem]


class ValidationErrorOut(BaseModel):
    """The 422 body: every problem found, each naming its field."""

    detail: list[ErrorItem]


class Page(BaseModel, Generic[T]):
    items: list[T]
    total: int
    limit: int
    offset: int


# ---------------------------------------------------------------------------------------------- users


class UserCreate(RequestBody):
    name: Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=NAME_PATTERN)]
    is_admin: bool = Field(False, strict=True)


class UserRead(BaseModel):
    id: int
    name: str
    is_admin: bool
    created_at: UtcDatetime


class UserCreated(BaseModel):
    user: UserRead
    token: str = Field(description="The API token. Shown once; only its hash is stored.")


# ---------------------------------------------------------------------------------------------- jobs


class JobCreate(RequestBody):
    name: JobName
    config: dict[str, Any] = Field(description="The training config, same schema as the YAML (see /config/schema).")
    priority: Priority = 0


class JobClone(RequestBody):
    name: JobName | None = None
    overrides: dict[Annotated[str, StringConstraints(max_length=512)], Any] = Field(
        default_factory=dict,
        max_length=100,
        description='Dotted keys, e.g. {"training.max_steps": 50, "rewards.0.weight": 1}; at most 100 keys of at most '
        "16 parts.",
    )
    priority: Priority | None = None


class JobRead(BaseModel):
    id: int
    name: str
    owner: str
    kind: str
    algorithm: str
    status: str
    priority: int
    attempts: int
    worker: str | None
    heartbeat_at: UtcDatetime | None
    current_step: int
    max_steps: int | None
    run_dir: str | None
    error: str | None
    preflight: dict[str, Any] | None
    cancel_requested: bool
    created_at: UtcDatetime
    updated_at: UtcDatetime
    started_at: UtcDatetime | None
    finished_at: UtcDatetime | None
    config: dict[str, Any]
    cloned_from: int | None
    sweep_id: int | None = Field(None, description="The sweep that created the job (GET /sweeps/{id}).")
    best_checkpoint: dict[str, Any] | None = Field(
        None,
        description='Training jobs evaluated with keep_best_by: {"metric", "step", "value", "evaluation_id", '
        '"path"}. That checkpoint is kept beyond keep_last_checkpoints.',
    )


class RankRead(BaseModel):
    rank: int
    node: int
    state: Literal["pending", "running", "finished", "failed", "cancelled"]
    error: str | None = Field(None, description="The rank's own error (it raised), from its error file.")
    log: str = Field(description="Its log, relative to the run directory (rank 0: train.log).")


class DistributedRead(BaseModel):
    launcher: Literal["local", "torchrun", "ray"]
    num_nodes: int
    processes_per_node: int
    world_size: int
    restarts: int = Field(0, description="Restarts of every rank from the last checkpoint after a rank failed.")
    ranks: list[RankRead]


class JobDetail(JobRead):
    distributed: DistributedRead | None = Field(
        None, description="Training jobs: launcher, nodes, world size and the state of each rank."
    )


class JobValidate(RequestBody):
    """The body of POST /jobs; the name may still be empty while a form is being filled in."""

    name: JobName | None = None
    config: dict[str, Any] = Field(description="The training config, same schema as the YAML (see /config/schema).")
    priority: Priority = 0


class ConfigProblem(BaseModel):
    loc: list[str | int] = Field(
        description='The field path as a list, e.g. ["training", "learning_rate"] or '
        '["rewards", 0, "weight"]; [] for the whole body.'
    )
    msg: str


class JobValidation(BaseModel):
    """What POST /jobs would do with this body, without creating anything."""

    valid: bool
    effective_config: dict[str, Any] | None = Field(
        description="Every default filled in (null when the config does not parse)."
    )
    errors: list[ConfigProblem]
    warnings: list[str]


class JobSubmitted(JobRead):
    warning: str | None = Field(None, description="Set when the job is stored but no worker could be woken now.")


class JobEventRead(BaseModel):
    id: int
    ts: UtcDatetime
    from_status: str | None
    to_status: str
    reason: str


JobSort = Literal["created_at", "-created_at", "priority", "-priority", "status"]


# ---------------------------------------------------------------------------------------------- job outputs


class MetricsOut(BaseModel):
    # A [step, value] pair as a 2-item array (not a tuple: its `prefixItems` trips some OpenAPI tools).
    series: dict[str, list[Annotated[list[int | float | None], Field(min_length=2, max_length=2)]]] = Field(
        description="name -> [[step, value], ...] by step."
    )
    names_available: list[str]
    downsampled: dict[str, bool] = Field(default_factory=dict, description="Which series were bucketed.")
    times: dict[str, list[float | None]] | None = Field(
        None, description="with_time=true: name -> when each point was logged (epoch seconds), aligned with series."
    )


class LogLines(BaseModel):
    lines: list[str]


class CheckpointRead(BaseModel):
    step: int
    path: str
    sha256: str
    size_bytes: int
    removed: bool
    created_at: UtcDatetime
    evaluation_id: int | None = Field(None, description="The latest succeeded evaluation of this checkpoint.")
    eval_metrics: dict[str, float] = Field(
        default_factory=dict, description='Its results, e.g. {"gsm8k/accuracy": 0.42}.'
    )
    is_best: bool = Field(False, description="The job's best checkpoint (see the job's best_checkpoint).")


# ---------------------------------------------------------------------------------------------- models


class ModelCreate(RequestBody):
    name: Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=NAME_PATTERN)] = Field(
        description="Usable as `model.path` in job configs."
    )
    path: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=4096)]


class ModelRead(BaseModel):
    id: int
    name: str
    path: str = Field(description="Relative to TP_DATA_DIR when inside it.")
    owner: str | None = Field(description="None: a platform model (the demo), usable by everyone.")
    shared: bool = Field(False, description="Usable by every user (set by the owner or an admin with PATCH).")
    info: dict[str, Any]
    created_at: UtcDatetime


# ---------------------------------------------------------------------------------------------- health


class HealthOut(BaseModel):
    status: Literal["ok", "error"]
    database: str
    broker: str
    version: str | None = None


# ---------------------------------------------------------------------------------------------- sweeps

SWEEP_MAX_JOBS = 64  # grid points x seeds
SWEEP_MAX_KEYS = 8
SWEEP_MAX_VALUES = 16  # per grid key
SWEEP_MAX_SEEDS = 10
SweepName = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=120)]
GridKey = Annotated[str, StringConstraints(min_length=1, max_length=200)]
Seed = Annotated[int, Field(ge=0, le=2**32 - 1, strict=True)]


class SweepCreate(RequestBody):
    name: SweepName = Field(description="Each job is named `<name> <key>=<value> ... seed=<seed>`.")
    config: dict[str, Any] = Field(description="The base training config (validated like POST /jobs).")
    grid: dict[GridKey, Annotated[list[Any], Field(min_length=1, max_length=SWEEP_MAX_VALUES)]] = Field(
        default_factory=dict,
        max_length=SWEEP_MAX_KEYS,
        description='Dotted config paths -> the values to try, e.g. {"training.learning_rate": [1e-4, 3e-4]}: one '
        f"job per combination and seed. At most {SWEEP_MAX_KEYS} keys of at most {SWEEP_MAX_VALUES} "
        f"distinct values; at most {SWEEP_MAX_JOBS} jobs in all. `training.seed` is set by `seeds`.",
    )
    seeds: Annotated[list[Seed], Field(min_length=1, max_length=SWEEP_MAX_SEEDS)] | None = Field(
        None,
        description="Distinct values of `training.seed`, one job per grid point each (default: the base "
        "config's seed).",
    )
    priority: Priority = 0


class SweepRead(BaseModel):
    id: int
    name: str
    owner: str
    grid: dict[str, list[Any]]
    seeds: list[int]
    created_at: UtcDatetime
    jobs_total: int = Field(description="Jobs of the sweep that still exist (deleted jobs are not counted).")
    status_counts: dict[str, int] = Field(description="status -> number of the sweep's jobs.")


class SweepJob(BaseModel):
    id: int
    name: str
    status: str
    point: dict[str, Any] = Field(description="The grid values of this job (grid key -> value).")
    seed: int | None
    current_step: int
    max_steps: int | None
    error: str | None
    metrics: dict[str, float | None] = Field(
        description="The last logged value of each metric (its final value once the job finished); null: not finite."
    )


class MetricStats(BaseModel):
    mean: float | None
    std: float | None = Field(description="Sample standard deviation (n - 1); null with fewer than 2 values.")
    n: int = Field(description="Seeds (succeeded jobs) that logged the metric.")


class SweepPoint(BaseModel):
    point: dict[str, Any]
    label: str = Field(description="e.g. `lr=0.0001 bs=8`.")
    job_ids: list[int]
    succeeded: int = Field(description="Its jobs that succeeded: the statistics are over these.")
    metrics: dict[str, MetricStats] = Field(
        description="Per metric: mean and sample std of the succeeded jobs' final values across seeds."
    )


class SweepDetail(SweepRead):
    config: dict[str, Any] = Field(description="The validated base config.")
    jobs: list[SweepJob]
    points: list[SweepPoint]
    warning: str | None = Field(None, description="Set when the jobs are stored but no worker could be woken now.")


# ---------------------------------------------------------------------------------------------- templates

TemplateName = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=NAME_PATTERN)]
TemplateDescription = Annotated[str, StringConstraints(max_length=2000)]


class TemplateCreate(RequestBody):
    name: TemplateName = Field(description="Unique among your templates.")
    description: TemplateDescription = ""
    config: dict[str, Any] = Field(
        description="A training config; checked by the schema and the cross-field rules. "
        "Paths are checked when a job is submitted from it, with the "
        "submitter's rights."
    )
    shared: bool = Field(
        False,
        strict=True,
        description="Every user may read (and use) it; only the owner and admins change or delete it.",
    )


class TemplateUpdate(RequestBody):
    name: TemplateName | None = None
    description: TemplateDescription | None = None
    config: dict[str, Any] | None = None
    shared: bool | None = Field(None, strict=True)


class TemplateRead(BaseModel):
    id: int
    name: str
    owner: str
    description: str
    config: dict[str, Any]
    shared: bool
    created_at: UtcDatetime
    updated_at: UtcDatetime

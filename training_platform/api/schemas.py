"""Request and response models of the REST API (Create / Read / Update per resource).

Request bodies forbid unknown keys and use strict integers, so a typo or a `"priority": "high"` is a clear 422
instead of a silently ignored or coerced value.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Generic, Literal, TypeVar

from fastapi import Path, Query
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

T = TypeVar("T")


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
        default_factory=dict, max_length=100,
        description='Dotted keys, e.g. {"training.max_steps": 50, "rewards.0.weight": 1}; at most 100 keys of at most '
                    '16 parts.')
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
    best_checkpoint: dict[str, Any] | None = Field(
        None, description='Training jobs evaluated with keep_best_by: {"metric", "step", "value", "evaluation_id", '
                          '"path"}. That checkpoint is kept beyond keep_last_checkpoints.')


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
        None, description="Training jobs: launcher, nodes, world size and the state of each rank.")


class JobValidate(RequestBody):
    """The body of POST /jobs; the name may still be empty while a form is being filled in."""

    name: JobName | None = None
    config: dict[str, Any] = Field(description="The training config, same schema as the YAML (see /config/schema).")
    priority: Priority = 0


class ConfigProblem(BaseModel):
    loc: list[str | int] = Field(description='The field path as a list, e.g. ["training", "learning_rate"] or '
                                             '["rewards", 0, "weight"]; [] for the whole body.')
    msg: str


class JobValidation(BaseModel):
    """What POST /jobs would do with this body, without creating anything."""

    valid: bool
    effective_config: dict[str, Any] | None = Field(
        description="Every default filled in (null when the config does not parse).")
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
        description="name -> [[step, value], ...] by step.")
    names_available: list[str]
    downsampled: dict[str, bool] = Field(default_factory=dict, description="Which series were bucketed.")


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
    eval_metrics: dict[str, float] = Field(default_factory=dict, description='Its results, e.g. '
                                                                            '{"gsm8k/accuracy": 0.42}.')
    is_best: bool = Field(False, description="The job's best checkpoint (see the job's best_checkpoint).")


# ---------------------------------------------------------------------------------------------- models


class ModelCreate(RequestBody):
    name: Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=NAME_PATTERN)] = Field(
        description="Usable as `model.path` in job configs.")
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

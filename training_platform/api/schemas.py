# Over 600 lines: every request and response model of /api/v1 in one module, the one source of its OpenAPI schema.
"""Request and response models of the REST API (Create / Read / Update per resource).

Request bodies forbid unknown keys and use strict integers, so a typo or a `"priority": "high"` is a clear 422
instead of a silently ignored or coerced value.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Generic, Literal, TypeVar, overload

from fastapi import Path, Query
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, WithJsonSchema

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


class QuotaUpdate(RequestBody):
    """An admin's limits for a user; null = no limit."""

    max_devices: int | None = Field(..., ge=0, le=100_000, description="Devices its jobs may hold at once.")
    max_running_jobs: int | None = Field(..., ge=0, le=100_000, description="Its jobs in preflight or running.")
    device_hours_per_week: float | None = Field(
        ...,
        ge=0,
        le=10_000_000,
        allow_inf_nan=False,
        description="Device-hours in any 7 days; when spent, new jobs get 403 until the window frees some.",
    )


class QuotaUsed(BaseModel):
    devices: int
    running_jobs: int
    device_hours_week: float


class QuotaRead(BaseModel):
    user_id: int
    user: str
    max_devices: int | None
    max_running_jobs: int | None
    device_hours_per_week: float | None
    source: Literal["user", "default"] = Field(description="user: an admin set it; default: the TP_QUOTA_* settings.")
    used: QuotaUsed
    week_frees_up_at: UtcDatetime | None = Field(
        None, description="When the weekly budget, if spent, frees up again (running jobs stopped now)."
    )


class UserCreated(BaseModel):
    user: UserRead
    token: str = Field(description="The API token. Shown once; only its hash is stored.")


# ---------------------------------------------------------------------------------------------- jobs

# Tags and the note of a job (the runs table): labels the owner sets, `GET /jobs?tag=` filters by one.
TAG_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]*$"
MAX_TAGS = 16
MAX_TAG_LENGTH = 32
MAX_NOTE_LENGTH = 4000
_TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]*")


def tag_problem(value: str) -> str | None:
    """Why `value` is not a valid tag (None: it is one)."""
    if not 1 <= len(value) <= MAX_TAG_LENGTH:
        return f"a tag has 1 to {MAX_TAG_LENGTH} characters, got {len(value)}"
    if not _TAG.fullmatch(value):
        return (
            f"a tag may only contain letters, digits, '.', '_', ':', '-' and must start with a letter or digit, "
            f"got {value[:40]!r}"
        )
    return None


def _check_tag(value: str) -> str:
    problem = tag_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def _tag_list(values: list[str]) -> list[str]:
    """At most MAX_TAGS; duplicates dropped, the first occurrence's order kept."""
    if len(values) > MAX_TAGS:
        raise ValueError(f"at most {MAX_TAGS} tags, got {len(values)}")
    return list(dict.fromkeys(values))


Tag = Annotated[
    str,
    AfterValidator(_check_tag),
    WithJsonSchema({"type": "string", "minLength": 1, "maxLength": MAX_TAG_LENGTH, "pattern": TAG_PATTERN}),
]
Tags = Annotated[
    list[Tag],
    AfterValidator(_tag_list),
    Field(
        json_schema_extra={"maxItems": MAX_TAGS},
        description=f"At most {MAX_TAGS} tags of 1-{MAX_TAG_LENGTH} characters (letters, digits, '.', '_', ':', "
        "'-'; starting with a letter or digit); duplicates are dropped, the first order kept.",
    ),
]
Note = Annotated[
    str, StringConstraints(max_length=MAX_NOTE_LENGTH), Field(description="Free text, e.g. what this run tries.")
]


class JobCreate(RequestBody):
    name: JobName
    config: dict[str, Any] = Field(description="The training config, same schema as the YAML (see /config/schema).")
    priority: Priority = 0
    tags: Tags = []
    note: Note = ""


class JobUpdate(RequestBody):
    """PATCH /jobs/{id}: only the fields sent change (the owner or an admin)."""

    tags: Tags | None = None
    note: Note | None = None


class JobClone(RequestBody):
    name: JobName | None = None
    overrides: dict[Annotated[str, StringConstraints(max_length=512)], Any] = Field(
        default_factory=dict,
        max_length=100,
        description='Dotted keys, e.g. {"training.max_steps": 50, "rewards.0.weight": 1}; at most 100 keys of at most '
        "16 parts.",
    )
    priority: Priority | None = None


class BestEval(BaseModel):
    metric: str = Field(description='A checkpoint evaluation\'s metric, e.g. "gsm8k/accuracy".')
    value: float
    step: int = Field(description="The evaluated checkpoint's step.")


class JobSummary(BaseModel):
    """What the runs table shows of a job's results (read from its metric points and checkpoint evaluations)."""

    last_loss: float | None = Field(None, description="The `loss` metric at the highest step it was logged at.")
    best_eval: BestEval | None = Field(
        None,
        description="The job's best checkpoint (keep_best_by) when it has one; else the best value (higher is "
        "better, the earliest step on a tie) of the alphabetically first metric among its evaluated checkpoints.",
    )
    last_reward: float | None = Field(
        None,
        description="RL jobs: the `reward` metric (GRPO, RLOO, REINFORCE++; PPO: `objective/rlhf_reward`) at the "
        "highest step it was logged at.",
    )
    last_step: int | None = Field(None, description="The step of the later of last_loss and last_reward.")


class QueueInfo(BaseModel):
    position: int = Field(description="1-based place in the training queue (priority, fair share, then age).")
    reason: str = Field(
        description='Why it waits, e.g. "waiting for 2 cuda devices: 1 free", "quota: bob runs 1 of 1 devices".'
    )


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
    tags: list[str] = Field(default_factory=list, description="The owner's labels (PATCH /jobs/{id}; GET /jobs?tag=).")
    note: str = Field("", description="The owner's free-text note (PATCH /jobs/{id}).")
    summary: JobSummary = Field(
        default_factory=lambda: JobSummary(), description="Its last loss and reward and its best evaluation."
    )
    queue: QueueInfo | None = Field(
        None, description="Queued training jobs (GET /jobs and /jobs/{id}): its place in the queue and why it waits."
    )
    pool: str | None = Field(
        None, description='Where its current or last attempt was admitted: "node:<host>" or "ray" (the scheduler).'
    )
    device: str | None = Field(None, description="The device type it was admitted to (cuda, mps, cpu).")
    devices: int | None = Field(None, description="Devices it holds: resources.num_nodes x resources.num_devices.")


class RankRead(BaseModel):
    rank: int
    node: int
    state: Literal["pending", "running", "finished", "failed", "cancelled"]
    error: str | None = Field(None, description="The rank's own error (it raised), from its error file.")
    log: str = Field(description="Its log, relative to the run directory (rank 0: train.log).")


class WorkerPlacementRead(BaseModel):
    actor: str = Field(description="verl's actor class: WorkerDict (a torch rank), HFRolloutServer, TaskRunnerV1...")
    name: str | None = None
    node_id: str | None = Field(None, description="The Ray node it ran on.")
    node_ip: str | None = None
    pid: int | None = None


class DistributedRead(BaseModel):
    launcher: Literal["local", "torchrun", "ray"]
    num_nodes: int
    processes_per_node: int
    world_size: int
    restarts: int = Field(0, description="Restarts of every rank from the last checkpoint after a rank failed.")
    ranks: list[RankRead]
    workers: list[WorkerPlacementRead] = Field(
        default_factory=list, description="verl RL: the Ray node each of verl's actors ran on (empty otherwise)."
    )


class JobDetail(JobRead):
    distributed: DistributedRead | None = Field(
        None, description="Training jobs: launcher, nodes, world size and the state of each rank."
    )
    usage: JobUsage | None = Field(
        None,
        description="Training jobs that ran: devices x seconds, CPU seconds and peak memory over its attempts, "
        "and its cost (TP_DEVICE_HOUR_COST).",
    )


class JobValidate(RequestBody):
    """The body of POST /jobs; the name may still be empty while a form is being filled in."""

    name: JobName | None = None
    config: dict[str, Any] = Field(description="The training config, same schema as the YAML (see /config/schema).")
    priority: Priority = 0
    tags: Tags = []
    note: Note = ""


class ConfigProblem(BaseModel):
    loc: list[str | int] = Field(
        description='The field path as a list, e.g. ["training", "learning_rate"] or '
        '["rewards", 0, "weight"]; [] for the whole body.'
    )
    msg: str


class MemoryEstimateOut(BaseModel):
    device: str
    parameters: int
    trainable_parameters: int
    total_gib: float
    parts_gib: dict[str, float] = Field(description="weights, gradients, optimizer, activations, logits, ...")
    summary: str = Field(description='e.g. "~212 GiB per device: weights 131, optimizer 65, ..."')


class JobValidation(BaseModel):
    """What POST /jobs would do with this body, without creating anything."""

    valid: bool
    effective_config: dict[str, Any] | None = Field(
        description="Every default filled in (null when the config does not parse)."
    )
    errors: list[ConfigProblem]
    warnings: list[str]
    memory: MemoryEstimateOut | None = Field(
        None,
        description="Peak memory per device estimated from the model's config.json for the job's device "
        "(`auto`: the API host's); the worker's preflight refuses a job that cannot fit its device. Null when the "
        "files were not checked (an earlier problem) or the architecture is not one the estimate knows (a warning).",
    )


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


# ---------------------------------------------------------------------------------------------- saved views

MAX_VIEW_KEYS = 20
MAX_VIEW_TEXT = 200
ViewPage = Literal["jobs"]
ViewName = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=64)]
ViewText = Annotated[str, StringConstraints(max_length=MAX_VIEW_TEXT)]


def _view_query(query: dict[str, str]) -> dict[str, str]:
    if len(query) > MAX_VIEW_KEYS:
        raise ValueError(f"at most {MAX_VIEW_KEYS} keys, got {len(query)}")
    return query


ViewQuery = Annotated[
    dict[Annotated[str, StringConstraints(min_length=1, max_length=MAX_VIEW_TEXT)], ViewText],
    AfterValidator(_view_query),
    Field(
        json_schema_extra={"maxProperties": MAX_VIEW_KEYS},
        description=f"The page's query as string keys to string values (at most {MAX_VIEW_KEYS} keys; keys and "
        f'values of at most {MAX_VIEW_TEXT} characters), e.g. {{"status": "running", "tag": "baseline"}}.',
    ),
]


class SavedViewCreate(RequestBody):
    name: ViewName = Field(description="Saving a name you already use on this page replaces that view's query.")
    page: ViewPage = Field(description='The UI page the view belongs to (only "jobs" for now).')
    query: ViewQuery = {}


class SavedViewRead(BaseModel):
    id: int
    name: str
    page: str
    query: dict[str, str]
    created_at: UtcDatetime


# usage

UsageGroupBy = Literal["user", "job", "device"]


class UsageFigures(BaseModel):
    device_hours: float = Field(description="Devices x wall hours inside the window.")
    device_seconds: float
    jobs: int = Field(description="Distinct jobs.")
    cost: float = Field(description="Device-hours x the price of their device type (TP_DEVICE_HOUR_COST).")
    cpu_hours: float = Field(description="CPU time of the attempts counted (whole attempts, not clipped).")
    peak_memory_bytes: int = Field(description="The largest peak memory of the attempts counted.")


class UsageRow(UsageFigures):
    key: str = Field(description="The user's name, the job's id or the device type.")
    user_id: int | None = Field(None, description="group_by user.")
    user: str | None = Field(None, description="group_by user or job: the (job's) owner.")
    job_id: int | None = Field(None, description="group_by job.")
    job_name: str | None = Field(None, description="group_by job.")
    device: str | None = Field(None, description="group_by device: cuda, cpu or mps.")


class UsageTotal(UsageFigures):
    pass


class UsageDay(BaseModel):
    date: str = Field(description="The UTC day, YYYY-MM-DD.")
    user: str
    user_id: int
    device_hours: float


class UsageReport(BaseModel):
    since: UtcDatetime
    until: UtcDatetime
    group_by: UsageGroupBy
    prices: dict[str, float] = Field(description="Price of a device-hour per device type (TP_DEVICE_HOUR_COST).")
    rows: list[UsageRow] = Field(description="Most device-hours first.")
    total: UsageTotal
    daily: list[UsageDay] = Field(description="Device-hours per UTC day and user, oldest first.")


class JobUsage(BaseModel):
    device: str = Field(description="The device type of the latest attempt.")
    devices: int = Field(description="Devices of the latest attempt.")
    device_seconds: float
    device_hours: float
    cpu_seconds: float
    peak_memory_bytes: int
    cost: float
    attempts: int
    running: bool = Field(description="An attempt is running now (its figures count up to now).")

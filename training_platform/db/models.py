"""SQL tables (SQLModel). Schema changes go through Alembic (`training_platform/db/migrations`)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from sqlalchemy import JSON, BigInteger, Boolean, Column, ForeignKey, Index, Integer, Text, UniqueConstraint, false
from sqlmodel import Field, SQLModel

from training_platform.core.errors import Conflict
from training_platform.core.timeutil import utcnow


class JobStatus(StrEnum):
    queued = "queued"
    preflight = "preflight"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"


TERMINAL = {JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled}

# The job state machine. `running -> queued` is recovery (worker died); `failed/cancelled -> queued` is retry.
TRANSITIONS: dict[JobStatus, set[JobStatus]] = {
    JobStatus.queued: {JobStatus.preflight, JobStatus.cancelled, JobStatus.failed},
    JobStatus.preflight: {JobStatus.running, JobStatus.failed, JobStatus.cancelled, JobStatus.queued},
    JobStatus.running: {JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled, JobStatus.queued},
    JobStatus.succeeded: set(),
    JobStatus.failed: {JobStatus.queued},
    JobStatus.cancelled: {JobStatus.queued},
}


class IllegalTransition(Conflict):
    """A job status change the state machine (TRANSITIONS) does not allow."""


class _Keyed(Protocol):
    @property
    def id(self) -> int | None: ...


def row_id(row: _Keyed) -> int:
    """The primary key of a row that is in the database (read, or added and flushed). `id` is None only on a row
    not flushed yet: asking for it then is a bug, raised as such."""
    if row.id is None:
        raise RuntimeError(f"{type(row).__name__} has no id yet: it was not flushed to the database")
    return row.id


class User(SQLModel, table=True):
    __tablename__ = "users"
    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(index=True, unique=True, max_length=64)
    is_admin: bool = False
    created_at: datetime = Field(default_factory=utcnow)


class ApiToken(SQLModel, table=True):
    __tablename__ = "api_tokens"
    id: int | None = Field(default=None, primary_key=True)
    user_id: int = Field(foreign_key="users.id", index=True)
    token_hash: str = Field(index=True, unique=True, max_length=64)  # sha256 hex; the token itself is never stored
    prefix: str = Field(max_length=12)  # shown in listings so a user can tell tokens apart
    created_at: datetime = Field(default_factory=utcnow)
    last_used_at: datetime | None = None
    revoked: bool = False


class RegisteredModel(SQLModel, table=True):
    __tablename__ = "models"
    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(index=True, unique=True, max_length=128)
    path: str = Field(sa_column=Column(Text, nullable=False))
    owner_id: int | None = Field(default=None, foreign_key="users.id")
    # Shared by its owner or an admin: every user may see and use it (otherwise only its owner and admins).
    shared: bool = Field(default=False, sa_column=Column(Boolean, nullable=False, server_default=false()))
    info: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(default_factory=utcnow)


class Job(SQLModel, table=True):
    __tablename__ = "jobs"
    # AUTOINCREMENT on SQLite: a deleted job's id is never handed out again (PostgreSQL sequences never reuse).
    __table_args__ = (Index("ix_jobs_status_priority", "status", "priority"), {"sqlite_autoincrement": True})
    id: int | None = Field(default=None, primary_key=True)
    owner_id: int = Field(foreign_key="users.id", index=True)
    name: str = Field(max_length=200)
    kind: str = Field(default="train", max_length=16)  # train | data | eval (queues of the same names)
    algorithm: str = Field(max_length=32)
    config: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    # A plain string column (not a database ENUM) so new states need no type migration; JobStatus guards values.
    status: str = Field(default=JobStatus.queued.value, index=True, max_length=16)
    priority: int = 0
    attempts: int = 0
    worker: str | None = Field(default=None, max_length=200)
    heartbeat_at: datetime | None = None
    cancel_requested: bool = False
    current_step: int = 0
    max_steps: int | None = None
    run_dir: str | None = Field(default=None, sa_column=Column(Text))
    error: str | None = Field(default=None, sa_column=Column(Text))
    preflight: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))
    celery_task_id: str | None = Field(default=None, max_length=64)
    cloned_from: int | None = None
    # The sweep that created the job (`sweeps.id`; no foreign key, so adding it did not rebuild `jobs` on SQLite).
    sweep_id: int | None = Field(default=None, index=True)
    # Training jobs: the checkpoint with the best evaluation result by a chosen metric ({"metric", "step",
    # "value", "evaluation_id", "path"}), kept (protected from rotation) and shown.
    best_checkpoint: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))
    # The owner's labels for the runs table (`GET /jobs?tag=`) and a free-text note; neither changes how it runs.
    tags: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False, server_default="[]"))
    note: str = Field(default="", sa_column=Column(Text, nullable=False, server_default=""))
    # Scheduling (services/scheduler.py): when the job last entered the queue (its wait is counted from here), and
    # the devices its current (or last) attempt was admitted to: a pool ("node:<host>" or "ray"), a device type and
    # how many (resources.num_nodes x resources.num_devices).
    queued_at: datetime | None = None
    pool: str | None = Field(default=None, max_length=200)
    device: str | None = Field(default=None, max_length=16)
    devices: int | None = None
    created_at: datetime = Field(default_factory=utcnow, index=True)
    updated_at: datetime = Field(default_factory=utcnow)
    started_at: datetime | None = None
    finished_at: datetime | None = None


class JobEvent(SQLModel, table=True):
    __tablename__ = "job_events"
    id: int | None = Field(default=None, primary_key=True)
    job_id: int = Field(foreign_key="jobs.id", index=True)
    ts: datetime = Field(default_factory=utcnow)
    from_status: str | None = Field(default=None, max_length=16)
    to_status: str = Field(max_length=16)
    reason: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))


class MetricPoint(SQLModel, table=True):
    __tablename__ = "metric_points"
    # One value per (job, name, step): re-ingesting after a resume cannot duplicate a point.
    __table_args__ = (UniqueConstraint("job_id", "name", "step", name="uq_metric_job_name_step"),)
    # BIGINT on PostgreSQL; SQLite only auto-increments an INTEGER primary key.
    id: int | None = Field(
        default=None,
        sa_column=Column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    )
    job_id: int = Field(foreign_key="jobs.id")
    name: str = Field(max_length=128)
    step: int
    value: float
    ts: datetime = Field(default_factory=utcnow)


class MetricRollup(SQLModel, table=True):
    """Min/max of a metric series per aligned step bucket `[bucket * width, (bucket + 1) * width)`, for widths
    64, 256, ..., 4**10 (`training_platform.db.rollups`): a chart of a long run reads a few hundred of these rows
    instead of scanning every point. Written with the points (crud), never by hand; steps < 0 are not rolled up."""

    __tablename__ = "metric_rollups"
    job_id: int = Field(sa_column=Column(Integer, ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True))
    name: str = Field(max_length=128, primary_key=True)
    width: int = Field(primary_key=True)
    bucket: int = Field(primary_key=True)
    min_value: float
    min_step: int  # the first step holding min_value
    max_value: float
    max_step: int  # the first step holding max_value


class Checkpoint(SQLModel, table=True):
    __tablename__ = "checkpoints"
    __table_args__ = (UniqueConstraint("job_id", "step", name="uq_checkpoint_job_step"),)
    id: int | None = Field(default=None, primary_key=True)
    job_id: int = Field(foreign_key="jobs.id", index=True)
    step: int
    path: str = Field(sa_column=Column(Text, nullable=False))
    sha256: str = Field(max_length=64)  # over the sorted (file, sha256) list of the checkpoint's files
    size_bytes: int = Field(sa_column=Column(BigInteger, nullable=False))
    removed: bool = False  # rotated away by keep_last_checkpoints
    created_at: datetime = Field(default_factory=utcnow)


class Dataset(SQLModel, table=True):
    """A named dataset of one owner: a series of immutable, content-addressed versions (`dataset_versions`)."""

    __tablename__ = "datasets"
    __table_args__ = (UniqueConstraint("owner_id", "name", name="uq_dataset_owner_name"),)
    id: int | None = Field(default=None, primary_key=True)
    owner_id: int = Field(foreign_key="users.id", index=True)
    name: str = Field(max_length=128)
    description: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    shared: bool = Field(default=False, sa_column=Column(Boolean, nullable=False, server_default=false()))
    # The latest version (set on every new version). No foreign key: datasets <-> versions would be a cycle.
    current_version_id: int | None = None
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)


class DatasetVersionRecord(SQLModel, table=True):
    """One immutable dataset version, named by the sha256 of its file's bytes. The file lives in the content store
    (`path`, relative to TP_DATA_DIR: `datasets/<sha[:2]>/<sha><suffix>`); lineage = parent version + the operation
    and its full parameters (`recipe`) that produced it."""

    __tablename__ = "dataset_versions"
    __table_args__ = (UniqueConstraint("dataset_id", "sha256", name="uq_dataset_version_sha"),)
    id: int | None = Field(default=None, primary_key=True)
    dataset_id: int = Field(foreign_key="datasets.id", index=True)
    sha256: str = Field(max_length=64, index=True)
    path: str = Field(sa_column=Column(Text, nullable=False))
    format: str | None = Field(default=None, max_length=32)
    rows: int = 0
    size_bytes: int = Field(default=0, sa_column=Column(BigInteger, nullable=False, default=0))
    # field -> JSON type(s), e.g. {"messages": "array", "id": "integer|null"} ("schema" would shadow BaseModel's)
    row_schema: dict[str, Any] = Field(default_factory=dict, sa_column=Column("schema", JSON, nullable=False))
    stats: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    report: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))  # validation / operation report
    audit: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))  # `report.audit_file`, on demand
    parent_version_id: int | None = Field(default=None, foreign_key="dataset_versions.id", index=True)
    operation: str = Field(max_length=32)  # upload | register | clean | dedup | convert | score | decontaminate
    recipe: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))  # the operation's full parameters
    job_id: int | None = Field(default=None, index=True)  # the data job that produced it (no FK: jobs are deletable)
    created_at: datetime = Field(default_factory=utcnow)


# ---------------------------------------------------------------------------------------------- evaluation


class Evaluation(SQLModel, table=True):
    """What an `eval` job evaluates and what it found. One row per eval job: its id is the job's id, so the job's
    status, progress, logs, cancel and retry are the /jobs endpoints'."""

    __tablename__ = "evaluations"
    job_id: int = Field(primary_key=True, foreign_key="jobs.id")
    owner_id: int = Field(foreign_key="users.id", index=True)
    # How the model is shown: a registered model's name, "job 3 step 40", or the path.
    model_label: str = Field(max_length=300)
    # The local directory evaluated (or the served model name for an OpenAI-compatible endpoint): what a
    # leaderboard entry is, so two evaluations of one checkpoint are one entry.
    model_path: str = Field(sa_column=Column(Text, nullable=False))
    # The training job whose checkpoint this is (no foreign key: training jobs are deletable; the result stays).
    source_job_id: int | None = Field(default=None, index=True)
    checkpoint_step: int | None = None  # None with a source job: its final model
    schedule_id: int | None = Field(default=None, index=True)
    benchmarks: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    keep_best_by: str | None = Field(default=None, max_length=130)  # "gsm8k/accuracy": update the job's best
    output_dir: str | None = Field(default=None, sa_column=Column(Text))
    summary: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))  # summary.json when it finished
    created_at: datetime = Field(default_factory=utcnow)


class EvalMetric(SQLModel, table=True):
    """One summary metric of one benchmark of one evaluation (what the leaderboard and best-checkpoint read)."""

    __tablename__ = "eval_metrics"
    __table_args__ = (
        UniqueConstraint("job_id", "benchmark", "metric", name="uq_eval_metric"),
        Index("ix_eval_metrics_benchmark_metric", "benchmark", "metric"),
    )
    id: int | None = Field(default=None, primary_key=True)
    job_id: int = Field(foreign_key="evaluations.job_id", index=True)
    benchmark: str = Field(max_length=64)
    metric: str = Field(max_length=64)
    value: float
    stderr: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    n: int = 0


class EvalSample(SQLModel, table=True):
    """One scored sample (item x sample index) of one benchmark of one evaluation, for drill-down."""

    __tablename__ = "eval_samples"
    __table_args__ = (Index("ix_eval_samples_job_benchmark_position", "job_id", "benchmark", "position"),)
    id: int | None = Field(
        default=None,
        sa_column=Column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    )
    job_id: int = Field(foreign_key="evaluations.job_id")
    benchmark: str = Field(max_length=64)
    position: int  # order in the benchmark's samples file
    item_id: str = Field(max_length=300)
    sample_index: int = 0
    correct: bool | None = None
    extracted: str | None = Field(default=None, sa_column=Column(Text))
    reference: str | None = Field(default=None, sa_column=Column(Text))
    output: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    prompt: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    latency_s: float | None = None
    extra: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))


class EvalSchedule(SQLModel, table=True):
    """Auto-evaluation: on a cron expression (driven by Celery beat) or on every N-th new checkpoint of a job."""

    __tablename__ = "eval_schedules"
    id: int | None = Field(default=None, primary_key=True)
    owner_id: int = Field(foreign_key="users.id", index=True)
    name: str = Field(max_length=200)
    enabled: bool = True
    trigger: str = Field(max_length=32)  # cron | on_new_checkpoint
    cron: str | None = Field(default=None, max_length=120)
    # on_new_checkpoint: the training job watched. cron: the job whose latest checkpoint is evaluated (or None
    # with `model`).
    job_id: int | None = Field(default=None, index=True)
    model: str | None = Field(default=None, sa_column=Column(Text))
    every_n: int = 1
    # The evaluation to run: benchmarks, generation defaults, backend options (the POST /evaluations fields).
    request: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    keep_best_by: str | None = Field(default=None, max_length=130)
    priority: int = 0
    next_fire_at: datetime | None = Field(default=None, index=True)
    last_fired_at: datetime | None = None
    last_checkpoint_step: int = -1  # on_new_checkpoint: checkpoints up to this step have been considered
    fired_count: int = 0
    last_message: str | None = Field(default=None, sa_column=Column(Text))  # why the last firing did or did not run
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)


class Endpoint(SQLModel, table=True):
    """An OpenAI-compatible endpoint named by an admin (`/api/v1/endpoints`); `TP_ENDPOINTS` names more in the
    environment. Requests refer to endpoints by name only: users never choose a URL or a key's variable."""

    __tablename__ = "endpoints"
    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(index=True, unique=True, max_length=64)
    base_url: str = Field(sa_column=Column(Text, nullable=False))
    # The name of the environment variable holding the key on the workers (never the key itself).
    api_key_env: str | None = Field(default=None, max_length=128)
    models: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    created_by: int | None = Field(default=None, foreign_key="users.id")
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)


# ---------------------------------------------------------------------------------------------- sweeps, templates


class Sweep(SQLModel, table=True):
    """A hyper-parameter sweep: one training job per grid point and seed (`jobs.sweep_id`), all created at once.
    `config` is the validated base config; `grid` maps dotted config paths to their values (in the order given);
    `seeds` go to `training.seed`."""

    __tablename__ = "sweeps"
    id: int | None = Field(default=None, primary_key=True)
    owner_id: int = Field(foreign_key="users.id", index=True)
    name: str = Field(max_length=120)
    config: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    grid: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    seeds: list[int] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(default_factory=utcnow, index=True)


class JobTemplate(SQLModel, table=True):
    """A user's named training config (as written: checked by the schema and cross-field rules only; paths are
    checked when a job is submitted from it). Shared templates are readable by every user."""

    __tablename__ = "job_templates"
    __table_args__ = (UniqueConstraint("owner_id", "name", name="uq_job_template_owner_name"),)
    id: int | None = Field(default=None, primary_key=True)
    owner_id: int = Field(foreign_key="users.id", index=True)
    name: str = Field(max_length=128)
    description: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    config: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    shared: bool = Field(default=False, sa_column=Column(Boolean, nullable=False, server_default=false()))
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)


class SavedView(SQLModel, table=True):
    """A user's named view of a UI page (`page`: only "jobs" for now): the page's query string as a flat
    string -> string map (filters, sort, columns), applied by the UI. Private to its owner."""

    __tablename__ = "saved_views"
    __table_args__ = (UniqueConstraint("owner_id", "page", "name", name="uq_saved_view_owner_page_name"),)
    id: int | None = Field(default=None, primary_key=True)
    owner_id: int = Field(foreign_key="users.id", index=True)
    name: str = Field(max_length=64)
    page: str = Field(max_length=32)
    query: dict[str, str] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(default_factory=utcnow)


# ---------------------------------------------------------------------------------------------- webhooks


class Webhook(SQLModel, table=True):
    """A user's job-end notification: POST `url` (a host in the operator's TP_WEBHOOK_HOSTS) when one of the user's
    jobs ends with one of `events` (services/webhooks.py). `secret` signs the body (HMAC-SHA256); it is
    write-only over the API. The last delivery's outcome is kept for GET."""

    __tablename__ = "webhooks"
    id: int | None = Field(default=None, primary_key=True)
    owner_id: int = Field(foreign_key="users.id", index=True)
    url: str = Field(sa_column=Column(Text, nullable=False))
    events: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    secret: str | None = Field(default=None, max_length=256)
    created_at: datetime = Field(default_factory=utcnow)
    last_delivery_at: datetime | None = None
    last_event: str | None = Field(default=None, max_length=32)
    last_job_id: int | None = None
    last_status_code: int | None = None
    last_error: str | None = Field(default=None, sa_column=Column(Text))
    last_attempts: int = 0


# ---------------------------------------------------------------------------------------------- quality gates


class GateProfileRecord(SQLModel, table=True):
    """An admin-defined quality-gate profile (`/api/v1/gate-profiles`); built-ins and the operator's
    TP_GATE_PROFILES_FILE are not stored. `checks` is the normalised check -> params map; `hash` its sha256."""

    __tablename__ = "gate_profiles"
    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(index=True, unique=True, max_length=64)
    description: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    checks: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    hash: str = Field(max_length=64)
    created_by: int | None = Field(default=None, foreign_key="users.id")
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)


class GateReportRecord(SQLModel, table=True):
    """A quality-gate report of one dataset version under one profile (`training_platform.data.gate.run_gate`).
    No foreign key to the version (its dataset's deletion removes the reports); `sha256` is the version's."""

    __tablename__ = "gate_reports"
    __table_args__ = (Index("ix_gate_reports_version_profile", "dataset_version_id", "profile_name"),)
    id: int | None = Field(default=None, primary_key=True)
    dataset_version_id: int = Field(index=True)
    sha256: str = Field(max_length=64, index=True)
    profile_name: str = Field(max_length=64)
    profile_hash: str = Field(max_length=64)
    passed: bool = False
    report: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    job_id: int | None = Field(default=None, index=True)  # the data (or training) job that ran it
    created_at: datetime = Field(default_factory=utcnow, index=True)


# ---------------------------------------------------------------------------------------------- sharing the devices


class UserQuota(SQLModel, table=True):
    """An admin's limits for one user (`PUT /users/{id}/quota`); None = no limit. A user with no row gets the
    settings' defaults (TP_QUOTA_*). Concurrency limits make jobs wait; a spent weekly budget refuses new jobs."""

    __tablename__ = "user_quotas"
    user_id: int = Field(foreign_key="users.id", primary_key=True)
    max_devices: int | None = None
    max_running_jobs: int | None = None
    device_hours_per_week: float | None = None
    updated_by: int | None = Field(default=None, foreign_key="users.id")
    updated_at: datetime = Field(default_factory=utcnow)


class UsageRecord(SQLModel, table=True):
    """One attempt of a training job on its devices, from `running` to its end (services/jobs.transition opens and
    closes it): devices x wall seconds, plus the CPU seconds and peak memory measured from the training process
    tree by its worker (sampled while it runs; the end adds what the waited-for processes used)."""

    __tablename__ = "usage_records"
    id: int | None = Field(default=None, primary_key=True)
    # No foreign key to the job: deleting a job keeps what it used (the bill does not change).
    job_id: int = Field(index=True)
    owner_id: int = Field(foreign_key="users.id", index=True)
    attempt: int = 1
    pool: str = Field(default="", max_length=200)
    device: str = Field(default="cpu", max_length=16)
    devices: int = 1
    started_at: datetime = Field(default_factory=utcnow, index=True)
    ended_at: datetime | None = Field(default=None, index=True)
    cpu_seconds: float = 0.0
    peak_memory_bytes: int = Field(default=0, sa_column=Column(BigInteger, nullable=False, default=0))
    sampled_at: datetime | None = None


class ComputePool(SQLModel, table=True):
    """What a pool of devices holds, as its workers last saw it: `node:<host>` (a training worker's machine:
    TP_NODE_DEVICES or what it detects) or `ray` (the Ray cluster's CPUs and GPUs). Workers write it when they
    claim; the API reads it to say why a job waits."""

    __tablename__ = "compute_pools"
    name: str = Field(primary_key=True, max_length=200)
    devices: dict[str, int] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    updated_at: datetime = Field(default_factory=utcnow)

"""Platform settings from the environment (pydantic-settings). Same code everywhere; only these change.

| env              | default                                   |
|------------------|-------------------------------------------|
| TP_DATA_DIR      | ./var                                     |
| DATABASE_URL     | sqlite:///$TP_DATA_DIR/platform.db        |
| REDIS_URL        | unset: `tp up` starts an embedded Redis   |
| TP_MODEL_ROOTS   | extra directories jobs may read models from (`:`-separated) |
| TP_AUTH_MODE     | token (bearer API tokens); `open` = single-user, no tokens (local only) |
| TP_ENDPOINTS     | named outbound endpoints (docs/endpoints.md), JSON: `{"judge": {"base_url": "https://...",` |
|                  | `"api_key_env": "JUDGE_KEY", "models": ["m1"]}}`; requests name one, never a URL or a key |
| TP_ENDPOINTS_FILE | the same JSON in a file (read at each lookup; a name may not also be in TP_ENDPOINTS) |
| TP_METRICS_TOKEN | unset: /metrics is open; set: it requires `Authorization: Bearer <token>` |
| TP_WEBHOOK_HOSTS | unset: webhooks disabled. Comma-separated `host[:port]` a user's job-end webhook may POST to |
|                  | (no port: the scheme's default port only); the operator's rule, like TP_ENDPOINTS |
| TP_WEBHOOK_BACKOFF | 5 s: a failed webhook delivery is retried 3 times, after 1x, 4x, 16x this |
| TP_API_CONCURRENCY | 2: reads handled at once per API process (more wait, first come first served); 0 = no limit |
| TP_UP_MAX_CRASHES / TP_UP_CRASH_WINDOW / TP_UP_BACKOFF_MAX | 5 / 300 s / 30 s: `tp up`'s restart policy |
| TP_INFERENCE_CACHE | 2: models each inference worker process keeps loaded (least recently used evicted) |
| TP_INFERENCE_DEVICE | auto: where inference workers load models (`auto` = cuda when available, `cpu`, `cuda:N`) |
| TP_INFERENCE_PICKUP_TIMEOUT | 30 s: playground / OpenAI requests no inference worker took by then -> 503 |
| TP_INFERENCE_TIMEOUT | 120 s: a generation (model load included) still running after this -> 504 (stopped) |
| TP_INFERENCE_MAX_INFLIGHT | 4: generation requests of one user in progress at once (more -> 429) |
| TP_NODE_DEVICES  | unset: detected. This node's devices for training jobs, e.g. `cuda=8,cpu=16` (cpu: processes |
|                  | of CPU jobs; detected: the GPUs the driver lists, the cores this process may use, at least 2) |
| TP_WORKER_CONCURRENCY | unset: the node's devices (2..16). `tp up`'s training worker processes |
| TP_SCHED_RESERVE_AFTER_S | 600 s: a job waiting longer for its devices has them held for it |
| TP_QUOTA_MAX_DEVICES / TP_QUOTA_MAX_RUNNING_JOBS / TP_QUOTA_DEVICE_HOURS_PER_WEEK | unset: no limit. |
|                  | The quota of a user an admin set none for (`PUT /users/{id}/quota`) |
| TP_DEVICE_HOUR_COST | unset: no cost. A device-hour's price per device type, e.g. `cuda=2.5,cpu=0.05` |

Input caps (docs/limits.md):

| env                          | default | refused with                                                 |
|------------------------------|---------|--------------------------------------------------------------|
| TP_MAX_BODY_MB               | 8       | 413: any request body but a dataset upload (JSON bodies)     |
| TP_MAX_UPLOAD_MB             | 512     | 413: a dataset upload (streamed to disk, nothing kept)       |
| TP_MAX_DATASET_ROWS          | 2000000 | the ingest data job fails: rows in one dataset file          |
| TP_MAX_DATASET_EXPANDED_MB   | 2048    | the ingest data job fails: decoded bytes of one dataset file |
| TP_MAX_ROW_MB                | 8       | the ingest data job fails: one row (a JSONL/CSV line)        |
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="", extra="ignore", populate_by_name=True)

    data_dir: Path = Field(Path("var"), validation_alias="TP_DATA_DIR")
    database_url: str | None = Field(None, validation_alias="DATABASE_URL")
    redis_url: str | None = Field(None, validation_alias="REDIS_URL")
    model_roots: str = Field("", validation_alias="TP_MODEL_ROOTS")
    auth_mode: Literal["token", "open"] = Field("token", validation_alias="TP_AUTH_MODE")
    # Named outbound endpoints (core/endpoints.py): requests name one, never a URL or a key's variable.
    endpoints_json: str | None = Field(None, validation_alias="TP_ENDPOINTS")
    endpoints_file: str | None = Field(None, validation_alias="TP_ENDPOINTS_FILE")
    # Quality-gate profiles of the operator (YAML; training_platform/data/gate/), read-only over the API.
    gate_profiles_file: str | None = Field(None, validation_alias="TP_GATE_PROFILES_FILE")
    # The Ray cluster of `resources.launcher: ray` (and `tp up --ray`'s local head); unset: no cluster.
    ray_address: str | None = Field(None, validation_alias="TP_RAY_ADDRESS")
    # `executor: auto` of dataset operations and evaluations: Ray when there is a cluster and the input has more rows
    # (items) than this; else local.
    ray_min_rows: int = Field(200_000, validation_alias="TP_RAY_MIN_ROWS", ge=0)
    heartbeat_interval_s: float = Field(5.0, validation_alias="TP_HEARTBEAT_INTERVAL", gt=0)
    heartbeat_timeout_s: float = Field(60.0, validation_alias="TP_HEARTBEAT_TIMEOUT", gt=0)
    recovery_interval_s: float = Field(15.0, validation_alias="TP_RECOVERY_INTERVAL", gt=0)
    metrics_batch_interval_s: float = Field(1.0, validation_alias="TP_METRICS_BATCH_INTERVAL", gt=0)
    min_free_disk_mb: int = Field(512, validation_alias="TP_MIN_FREE_DISK_MB", ge=0)
    # How often beat looks for due evaluation schedules (cron resolution; checkpoint triggers fire sooner).
    schedule_tick_s: float = Field(10.0, validation_alias="TP_SCHEDULE_TICK", gt=0)
    # `tp up` restarts a child that exits (backoff 1 s, 2 s, 4 s, ... up to TP_UP_BACKOFF_MAX) and gives up, exit 1,
    # when one child exited TP_UP_MAX_CRASHES times within TP_UP_CRASH_WINDOW seconds (docs/operations.md).
    up_max_crashes: int = Field(5, validation_alias="TP_UP_MAX_CRASHES", ge=1)
    up_crash_window_s: float = Field(300.0, validation_alias="TP_UP_CRASH_WINDOW", gt=0)
    up_backoff_max_s: float = Field(30.0, validation_alias="TP_UP_BACKOFF_MAX", ge=0)
    # Input caps (docs/limits.md). Bodies are refused before they are parsed; dataset files by the ingest data job.
    max_body_mb: float = Field(8.0, validation_alias="TP_MAX_BODY_MB", gt=0)
    max_upload_mb: float = Field(512.0, validation_alias="TP_MAX_UPLOAD_MB", gt=0)
    max_dataset_rows: int = Field(2_000_000, validation_alias="TP_MAX_DATASET_ROWS", ge=1)
    max_dataset_expanded_mb: float = Field(2048.0, validation_alias="TP_MAX_DATASET_EXPANDED_MB", gt=0)
    max_row_mb: float = Field(8.0, validation_alias="TP_MAX_ROW_MB", gt=0)
    # Sharing the devices (services/scheduler.py, services/quotas.py, services/usage.py).
    node_devices: str = Field("", validation_alias="TP_NODE_DEVICES", max_length=200)
    worker_concurrency: int | None = Field(None, validation_alias="TP_WORKER_CONCURRENCY", ge=1, le=256)
    sched_reserve_after_s: float = Field(600.0, validation_alias="TP_SCHED_RESERVE_AFTER_S", ge=0, le=30 * 86400)
    quota_max_devices: int | None = Field(None, validation_alias="TP_QUOTA_MAX_DEVICES", ge=0, le=100_000)
    quota_max_running_jobs: int | None = Field(None, validation_alias="TP_QUOTA_MAX_RUNNING_JOBS", ge=0, le=100_000)
    quota_device_hours_per_week: float | None = Field(
        None, validation_alias="TP_QUOTA_DEVICE_HOURS_PER_WEEK", ge=0, le=10_000_000
    )
    device_hour_cost: str = Field("", validation_alias="TP_DEVICE_HOUR_COST", max_length=500)
    # /metrics requires `Authorization: Bearer <this>` when set (open when unset).
    metrics_token: str | None = Field(None, validation_alias="TP_METRICS_TOKEN")
    # Reads (GET/HEAD) handled at once per API process; more wait their turn (0: no limit). api/observability.py
    api_concurrency: int = Field(2, validation_alias="TP_API_CONCURRENCY", ge=0, le=1000)
    # Inference workers (queue `inference`: the playground and /openai/v1; workers/inference_tasks.py).
    inference_cache_size: int = Field(2, validation_alias="TP_INFERENCE_CACHE", ge=1, le=64)
    inference_device: str = Field(
        "auto", validation_alias="TP_INFERENCE_DEVICE", pattern=r"^(auto|cpu|cuda(:\d{1,2})?)$"
    )
    inference_pickup_timeout_s: float = Field(30.0, validation_alias="TP_INFERENCE_PICKUP_TIMEOUT", gt=0, le=3600)
    inference_timeout_s: float = Field(120.0, validation_alias="TP_INFERENCE_TIMEOUT", gt=0, le=3600)
    inference_max_inflight: int = Field(4, validation_alias="TP_INFERENCE_MAX_INFLIGHT", ge=1, le=1000)
    # Job-end webhooks (services/webhooks.py): the hosts they may POST to (empty: webhooks disabled), and
    # the retry backoff base of a failed delivery (retries after 1x, 4x, 16x it).
    webhook_hosts: str = Field("", validation_alias="TP_WEBHOOK_HOSTS", max_length=10_000)
    webhook_backoff_s: float = Field(5.0, validation_alias="TP_WEBHOOK_BACKOFF", ge=0, le=3600)
    # The evaluation sandbox (evaluation/sandbox.py): code runs unisolated only when the operator says so; the bwrap
    # binary (default: found on PATH); as root, the first uid programs run as (each claims one above it).
    sandbox_allow_unsafe: bool = Field(False, validation_alias="TP_SANDBOX_ALLOW_UNSAFE")
    sandbox_bwrap: str | None = Field(None, validation_alias="TP_SANDBOX_BWRAP", max_length=4096)
    sandbox_uid_base: int = Field(1_500_000_000, validation_alias="TP_SANDBOX_UID_BASE", ge=1000, le=4_000_000_000)
    # Gate reports a worker computed before the training process starts (training/gate_check.py).
    gate_reports_dir: str | None = Field(None, validation_alias="TP_GATE_REPORTS_DIR", max_length=4096)
    # prometheus_client's multiprocess directory (core/telemetry.py; default $TP_DATA_DIR/prometheus).
    prometheus_multiproc_dir: str | None = Field(None, validation_alias="PROMETHEUS_MULTIPROC_DIR", max_length=4096)

    @property
    def data_path(self) -> Path:
        return self.data_dir.expanduser().resolve()

    @property
    def db_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_path / 'platform.db'}"

    @property
    def allowed_roots(self) -> list[Path]:
        roots = [self.data_path]
        roots += [Path(p).expanduser().resolve() for p in self.model_roots.split(":") if p.strip()]
        return roots


# What a Ray worker (Ray Train rank, evaluation actor, Ray Data task) gets from its driver's environment: paths and
# offline flags, never tokens or keys. One list for every Ray driver of the platform.
RAY_WORKER_ENV = (
    "TP_DATA_DIR",
    "TP_MODEL_ROOTS",
    "HF_HUB_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "TOKENIZERS_PARALLELISM",
    "HF_HOME",
    "PYTHONPATH",
)


def ray_worker_env(*extra: str) -> dict[str, str]:
    """The driver's values of RAY_WORKER_ENV (and `extra` names) that are set."""
    return {k: os.environ[k] for k in (*RAY_WORKER_ENV, *extra) if k in os.environ}


@lru_cache
def get_settings() -> Settings:
    """The process's settings, read once (services: the API, workers)."""
    return Settings()


def current_settings() -> Settings:
    """The settings as the environment says now (the training core and CLI, whose environment a command line or a
    launcher may change while the process runs). Re-read only when a variable it reads changed (building Settings
    costs ~1 ms; this is called per path resolved)."""
    return _settings_for(tuple(sorted((k, v) for k, v in os.environ.items() if k in _ENV_NAMES)))


@lru_cache(maxsize=8)
def _settings_for(env: tuple[tuple[str, str], ...]) -> Settings:
    # A bad variable is the operator's input: named, with the reason, not a pydantic traceback.
    from pydantic import ValidationError

    from training_platform.core.errors import InvalidInput, pydantic_errors

    try:
        return Settings()
    except ValidationError as exc:
        raise InvalidInput(pydantic_errors(exc)) from None


_ENV_NAMES = frozenset(
    str(f.validation_alias) for f in Settings.model_fields.values() if isinstance(f.validation_alias, str)
)

"""Platform settings from the environment (pydantic-settings). Same code everywhere; only these change.

| env              | default                                   |
|------------------|-------------------------------------------|
| TP_DATA_DIR      | ./var                                     |
| DATABASE_URL     | sqlite:///$TP_DATA_DIR/platform.db        |
| REDIS_URL        | unset: `tp up` starts an embedded Redis   |
| TP_MODEL_ROOTS   | extra directories jobs may read models from (`:`-separated) |
| TP_AUTH_MODE     | token (bearer API tokens); `open` = single-user, no tokens (local only) |
| TP_METRICS_TOKEN | unset: /metrics is open; set: it requires `Authorization: Bearer <token>` |
| TP_API_CONCURRENCY | 4: reads handled at once per API process (more wait, first come first served); 0 = no limit |
"""

from __future__ import annotations

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
    heartbeat_interval_s: float = Field(5.0, validation_alias="TP_HEARTBEAT_INTERVAL", gt=0)
    heartbeat_timeout_s: float = Field(60.0, validation_alias="TP_HEARTBEAT_TIMEOUT", gt=0)
    recovery_interval_s: float = Field(15.0, validation_alias="TP_RECOVERY_INTERVAL", gt=0)
    metrics_batch_interval_s: float = Field(1.0, validation_alias="TP_METRICS_BATCH_INTERVAL", gt=0)
    min_free_disk_mb: int = Field(512, validation_alias="TP_MIN_FREE_DISK_MB", ge=0)
    # How often beat looks for due evaluation schedules (cron resolution; checkpoint triggers fire sooner).
    schedule_tick_s: float = Field(10.0, validation_alias="TP_SCHEDULE_TICK", gt=0)
    # /metrics requires `Authorization: Bearer <this>` when set (open when unset).
    metrics_token: str | None = Field(None, validation_alias="TP_METRICS_TOKEN")
    # Reads (GET/HEAD) handled at once per API process; more wait their turn (0: no limit). api/observability.py
    api_concurrency: int = Field(4, validation_alias="TP_API_CONCURRENCY", ge=0, le=1000)

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


@lru_cache
def get_settings() -> Settings:
    return Settings()

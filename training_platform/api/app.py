"""The FastAPI application: `uvicorn training_platform.api.app:app`.

Everything lives under /api/v1 (OpenAPI UI at /docs); /health and /metrics are also served at the root for probes
and scrapers. Creating the app touches neither the database nor the broker.
"""

from __future__ import annotations

import logging

from fastapi import APIRouter, FastAPI

from training_platform.api import errors
from training_platform.api.observability import ObservabilityMiddleware, RequestMetrics
from training_platform.api.routes import (
    checkpoints,
    config,
    datasets,
    evaluations,
    health,
    jobs,
    logs,
    metrics,
    models,
    monitoring,
    schedules,
    users,
)

API_PREFIX = "/api/v1"

DESCRIPTION = """
Submit, watch and manage post-training jobs (SFT, DPO, KTO, ORPO, SimPO, GRPO, RLOO, PPO, reward models);
prepare datasets; evaluate models and checkpoints (GSM8K, MATH, HumanEval, multiple choice, custom sets), by hand,
on a cron schedule or on every new checkpoint, with a leaderboard per benchmark.

Authenticate with `Authorization: Bearer <token>`. Errors are `{"detail": "..."}`; validation errors list every
problem as `{"detail": [{"loc": "algorithm.num_generations", "msg": "must be >= 2, got 1"}, ...]}`.
"""


def _default_logging() -> None:
    """Under a bare `uvicorn training_platform.api.app:app` nothing configures our loggers and INFO records (the
    access log) would be dropped; give them a handler unless the host process set up logging itself."""
    ours = logging.getLogger("training_platform")
    if ours.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    ours.addHandler(handler)
    ours.setLevel(logging.INFO)


def create_app() -> FastAPI:
    _default_logging()
    app = FastAPI(title="training_platform", version="1", description=DESCRIPTION,
                  openapi_url=f"{API_PREFIX}/openapi.json", docs_url="/docs", redoc_url=None)
    # /openapi.json at the root too, where most tools look first.
    app.add_api_route("/openapi.json", lambda: app.openapi(), include_in_schema=False)
    errors.install(app)

    api = APIRouter(prefix=API_PREFIX)
    for module in (jobs, metrics, logs, checkpoints, models, datasets, evaluations, schedules, users, monitoring,
                   health, config):
        api.include_router(module.router)
    app.include_router(api)
    app.include_router(health.router, include_in_schema=False)  # /health, /metrics

    app.state.request_metrics = RequestMetrics()
    app.add_middleware(ObservabilityMiddleware, metrics=app.state.request_metrics)
    return app


app = create_app()

"""The FastAPI application: `uvicorn training_platform.api.app:app`.

Everything lives under /api/v1 (OpenAPI UI at /docs); /health and /metrics are also served at the root for probes
and scrapers. Creating the app touches neither the database nor the broker.
"""

from __future__ import annotations

import logging
from pathlib import Path

from fastapi import APIRouter, Depends, FastAPI
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline

from training_platform.api import deps, errors
from training_platform.api.limits import BodyLimitMiddleware
from training_platform.api.observability import ObservabilityMiddleware
from training_platform.api.routes import (
    checkpoints,
    config,
    datasets,
    endpoints,
    evaluations,
    exports,
    gates,
    health,
    jobs,
    logs,
    metrics,
    models,
    monitoring,
    openai_compat,
    openai_pooling,
    playground,
    rewards,
    rollouts,
    schedules,
    sweeps,
    templates,
    usage,
    users,
    views,
    webhooks,
)

API_PREFIX = "/api/v1"

DESCRIPTION = """
Submit, watch and manage post-training jobs (SFT, DPO, KTO, ORPO, SimPO, GRPO, RLOO, PPO, reward models);
prepare datasets; evaluate models and checkpoints (GSM8K, MATH, HumanEval, multiple choice, custom sets), by hand,
on a cron schedule or on every new checkpoint, with a leaderboard per benchmark. Served models and judges are
reached through endpoints the operator named (`GET /endpoints`); requests name one, never a URL or a key.

Authenticate with `Authorization: Bearer <token>`. Errors are `{"detail": "..."}`; validation errors (422) list every
problem as `{"detail": [{"loc": "algorithm.num_generations", "msg": "must be >= 2, got 1"}, ...]}` (`loc` is a
dotted string). Every operation documents the status codes it answers; see docs/api-errors.md.
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


UI_DIR = Path(__file__).parent / "static" / "ui"  # the built Vue app (frontend/: npm run build writes it here)


def _mount_ui(app: FastAPI) -> None:
    """The dashboard at /ui/ (same origin as the API, so it needs no CORS); / redirects there."""
    app.add_api_route("/", lambda: RedirectResponse("/ui/"), include_in_schema=False)
    if (UI_DIR / "index.html").is_file():
        app.mount("/ui", StaticFiles(directory=UI_DIR, html=True), name="ui")
    else:
        missing = (
            "<h1>training_platform</h1><p>The web UI is not built in this checkout: "
            "<code>cd frontend &amp;&amp; npm ci &amp;&amp; npm run build</code>. The API is at "
            "<a href='/docs'>/docs</a>.</p>"
        )
        app.add_api_route(
            "/ui/{path:path}", lambda path="": HTMLResponse(missing, status_code=404), include_in_schema=False
        )


def create_app() -> FastAPI:
    _default_logging()
    # Swagger UI's JS/CSS served from the package, not a CDN: /docs works on an offline machine.
    app = FastAPIOffline(
        title="training_platform",
        version="1",
        description=DESCRIPTION,
        openapi_url=f"{API_PREFIX}/openapi.json",
        docs_url="/docs",
        redoc_url=None,
    )
    # /openapi.json at the root too, where most tools look first.
    app.add_api_route("/openapi.json", lambda: app.openapi(), include_in_schema=False)
    errors.install(app)

    api = APIRouter(prefix=API_PREFIX, dependencies=[Depends(deps.no_nul_in_params)])
    for module in (
        jobs,
        metrics,
        logs,
        checkpoints,
        models,
        datasets,
        evaluations,
        schedules,
        endpoints,
        users,
        monitoring,
        health,
        config,
    ):
        api.include_router(module.router)
    for module in (sweeps, templates, views):
        api.include_router(module.router)
    for module in (exports, webhooks):
        api.include_router(module.router)
    api.include_router(gates.router)
    api.include_router(usage.router)
    api.include_router(rewards.router)
    api.include_router(rollouts.router)
    api.include_router(playground.router)
    api.include_router(openai_compat.router)
    api.include_router(openai_pooling.router)
    app.include_router(api)
    app.include_router(health.router, include_in_schema=False)  # /health, /metrics

    _mount_ui(app)

    # Bodies over TP_MAX_BODY_MB -> 413 before any parsing; the dataset upload streams to disk under its own cap.
    app.add_middleware(BodyLimitMiddleware, exempt={("POST", f"{API_PREFIX}/datasets")})
    app.add_middleware(ObservabilityMiddleware)
    return app


app = create_app()

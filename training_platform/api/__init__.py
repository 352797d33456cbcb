"""REST API (FastAPI), everything under /api/v1; OpenAPI UI at /docs. Run: `uvicorn training_platform.api.app:app`.

    jobs.py         POST/GET /jobs, GET /jobs/{id}, /events, POST /cancel, /retry, /clone, DELETE /jobs/{id}
    metrics.py      GET /jobs/{id}/metrics       (min/max per aligned bucket from rollup tiers: downsample.py)
    logs.py         GET /jobs/{id}/logs, /logs/stream (Server-Sent Events)
    checkpoints.py  GET /jobs/{id}/checkpoints
    models.py       POST/GET /models, GET/DELETE /models/{id}
    users.py        GET /users/me; admins: POST/GET /users
    monitoring.py   GET /monitoring/dashboard
    health.py       GET /health, GET /metrics (Prometheus, TP_METRICS_TOKEN when set; both also at the root)
    config.py       GET /config/schema

deps.py: session, current user (bearer token; TP_AUTH_MODE=open -> local admin), visible jobs (others' are 404).
errors.py: every 4xx is {"detail": ...}; validation errors are [{"loc": "field.path", "msg": ...}, ...].
jobspec.py: job config validation for HTTP (layers 1-2 + the path policy of training_platform/path_policy.py); layer 3
runs in the worker.
observability.py: access log (no headers, no query strings) and request metrics.
"""

"""The queue between the API, the services and the workers: the Celery app (`app`: queues, task names, routing)
and the wake-up sender (`wake`). It imports only `core/`, so every room may send through it without a cycle; the
tasks themselves live in `workers/` and are named here as strings."""

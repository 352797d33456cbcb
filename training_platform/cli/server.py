"""The platform's `tp` commands: `db upgrade`, `users create`, `worker`, `beat`, `api`, `up`.

`register(app)` adds them to the main `tp` Typer app.
"""

from __future__ import annotations

import os
import sys

import typer

from training_platform.cli import process_supervisor, processes
from training_platform.cli.common import err as _err


def _exec(argv: list[str]) -> None:
    """Replace this process (signals then reach Celery / uvicorn directly)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(argv[0], argv)


def db_upgrade():
    """Create or migrate the database schema to the latest revision (Alembic)."""
    from training_platform.core.settings import get_settings
    from training_platform.db.migrate import upgrade

    upgrade()
    typer.echo(f"database at the latest revision: {process_supervisor.redact_url(get_settings().db_url)}")


def users_create(
    name: str = typer.Argument(..., help="User name (unique)."),
    admin: bool = typer.Option(False, "--admin", help="Make the user an administrator."),
):
    """Create a user and print its API token (alone, on the last line; it is shown only once)."""
    from sqlalchemy import inspect

    from training_platform.db import crud
    from training_platform.db.session import get_engine, session_scope

    if not inspect(get_engine()).has_table("users"):
        _err("the database has no tables yet: run `tp db upgrade` first")
        raise typer.Exit(2)
    try:
        with session_scope() as session:
            user, token = crud.create_user(session, name, is_admin=admin)
            user_id = user.id
    except ValueError as exc:
        _err(f"error: {exc}")
        raise typer.Exit(2) from None
    typer.echo(f"created user {name!r} (id {user_id}{', admin' if admin else ''}); API token, shown once:")
    typer.echo(token)


def worker_cmd(
    queues: str = typer.Option("train", "--queues", "-Q", help="Comma-separated queues to consume."),
    concurrency: int | None = typer.Option(
        None,
        "--concurrency",
        "-c",
        min=1,
        help="Jobs run at the same time (default: TP_WORKER_CONCURRENCY, else this node's devices, 2..16).",
    ),
    name: str | None = typer.Option(None, "--name", "-n", help="Celery node name (default <queues>-<pid>@host)."),
    loglevel: str = typer.Option("INFO", "--loglevel", "-l"),
):
    """Run a Celery worker (prefork pool, fair scheduling) that trains queued jobs."""
    concurrency = concurrency or processes.training_worker_concurrency()
    _exec(processes.worker_argv(queues=queues, concurrency=concurrency, name=name, loglevel=loglevel))


def beat_cmd(loglevel: str = typer.Option("INFO", "--loglevel", "-l")):
    """Run the scheduler (Celery beat + the recovery sweep). Run exactly one.

    Beat sends the recovery sweep every TP_RECOVERY_INTERVAL s; it is embedded in a one-process worker that runs
    the sweep itself (queue `maintenance`), so recovery never waits behind busy training workers."""
    from training_platform.core.settings import get_settings

    data_dir = get_settings().data_path
    data_dir.mkdir(parents=True, exist_ok=True)
    _exec(processes.beat_argv(data_dir / "celerybeat-schedule", loglevel=loglevel))


WORKERS_HELP = "API processes serving one socket (default: the number of cores)."


def api_cmd(
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(8000, "--port"),
    workers: int | None = typer.Option(None, "--workers", "-w", min=1, help=WORKERS_HELP),
    app: str = typer.Option(processes.DEFAULT_API_APP, "--app", hidden=True, help="ASGI application to serve."),
):
    """Serve the HTTP API (uvicorn; several processes with --workers, restarted by uvicorn if one dies)."""
    if not processes.api_app_exists(app):
        _err(f"error: the API application {app!r} cannot be imported")
        raise typer.Exit(2)
    _exec(processes.api_argv(host=host, port=port, app=app, workers=workers or processes.default_api_workers()))


def up_cmd(
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(8000, "--port"),
    grace: float = typer.Option(60.0, "--grace", min=0, help="Seconds to let a running job checkpoint on stop."),
    api_workers: int | None = typer.Option(None, "--api-workers", min=1, help=WORKERS_HELP),
    app: str = typer.Option(processes.DEFAULT_API_APP, "--app", hidden=True, help="ASGI application to serve."),
    ray: bool = typer.Option(
        False,
        "--ray",
        help="Also run a local Ray head (loopback, token auth) and point "
        "TP_RAY_ADDRESS at it: jobs with resources.launcher ray run there.",
    ),
):
    """Run the whole platform on this machine (api + worker + beat) until Ctrl-C, as their supervisor.

    Migrates the database, starts an embedded Redis if REDIS_URL is unset, prepares the demo models on first
    start, creates an admin user if there is none (its token is printed once), then runs api, worker, eval worker,
    inference worker (the playground, /openai/v1) and beat as child processes. A child that dies is restarted (with
    backoff; after TP_UP_MAX_CRASHES exits within TP_UP_CRASH_WINDOW s `tp up` gives up and exits 1). Ctrl-C / SIGTERM
    stops them all (a running job checkpoints and is requeued). See docs/operations.md."""
    code = process_supervisor.run_platform(
        host=host,
        port=port,
        app=app,
        grace_s=grace,
        api_workers=api_workers or processes.default_api_workers(),
        ray=ray,
        echo=lambda message: typer.echo(message),
    )
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    """Add the platform commands to the `tp` app."""
    db_app = typer.Typer(help="Database schema.", no_args_is_help=True)
    db_app.command("upgrade")(db_upgrade)
    users_app = typer.Typer(help="Users and API tokens.", no_args_is_help=True)
    users_app.command("create")(users_create)
    app.add_typer(db_app, name="db")
    app.add_typer(users_app, name="users")
    app.command("worker")(worker_cmd)
    app.command("beat")(beat_cmd)
    app.command("api")(api_cmd)
    app.command("up")(up_cmd)

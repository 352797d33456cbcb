"""What every command group shares: messages to stderr, and one mapping of errors to exit codes."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import typer


def err(message: str) -> None:
    typer.echo(message, err=True)


Handler = Callable[[BaseException], int | None]


@contextlib.contextmanager
def guard(special: Handler | None = None) -> Iterator[None]:
    """Report an error as the CLI does everywhere: the platform's own errors (core/errors.py) one `path: reason`
    per line with their exit code (2 for invalid input), pydantic errors translated (exit 2), a missing file or a
    refused value (exit 2), anything else `FATAL: ...` (exit 1). `special(exc)` may report a command group's own
    errors first and return the exit code (None: not handled)."""
    from pydantic import ValidationError

    from training_platform.core.errors import PlatformError, pydantic_errors

    try:
        yield
    except typer.Exit:
        raise
    except KeyboardInterrupt:
        err("FATAL: interrupted")
        raise typer.Exit(1) from None
    except Exception as exc:  # noqa: BLE001 - the CLI's last resort: every error reported, none hidden
        code = special(exc) if special is not None else None
        if code is None:
            if isinstance(exc, PlatformError):
                for error in exc.errors:
                    err(str(error))
                code = exc.exit_code
            elif isinstance(exc, ValidationError):
                for error in pydantic_errors(exc):
                    err(str(error).removeprefix("<root>: "))
                code = 2
            elif isinstance(exc, ValueError | FileNotFoundError | NotADirectoryError | IsADirectoryError):
                err(str(exc))
                code = 2
            else:
                err(f"FATAL: {type(exc).__name__}: {exc}")
                code = 1
        raise typer.Exit(code) from None

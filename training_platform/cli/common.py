"""What every command group shares: messages to stderr."""

from __future__ import annotations

import typer


def err(message: str) -> None:
    typer.echo(message, err=True)

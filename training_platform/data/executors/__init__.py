"""Executors of the data factory: where an operation's row work runs (base.py). To add one: a module here with an
`Executor` subclass decorated with `@register_executor("<name>")`, and its import below."""

from __future__ import annotations

# Each import registers its executor.
# isort: off
from training_platform.data.executors import local, ray_data  # noqa: F401

# isort: on
from training_platform.data.executors.base import (
    DEFAULT_BLOCK_ROWS,
    EXECUTORS,
    BlockStage,
    Executor,
    ExecutorError,
    RowRange,
    get_executor,
    plan_ranges,
    read_range,
    register_executor,
)

__all__ = [
    "DEFAULT_BLOCK_ROWS",
    "EXECUTORS",
    "BlockStage",
    "Executor",
    "ExecutorError",
    "RowRange",
    "get_executor",
    "plan_ranges",
    "read_range",
    "register_executor",
]

"""Dataset operations: the registry (base.py) and one module per operation. To add one: a module here with its
Params and an `Operation` subclass decorated with `@register_operation("<name>", Params)`, and its import below."""

from __future__ import annotations

# Each import registers its operation; the order of registration is the order of listing.
# isort: off
from training_platform.data.operations import clean, dedup, convert, score, decontaminate  # noqa: F401

# isort: on
from training_platform.data.operations.base import (
    OPERATIONS,
    CheckContext,
    FieldErrors,
    Operation,
    OperationParams,
    OperationResult,
    PathKind,
    RunContext,
    get_operation,
    jsonable,
    operation_names,
    params_model,
    register_operation,
    unregister_operation,
)

__all__ = [
    "OPERATIONS",
    "CheckContext",
    "FieldErrors",
    "Operation",
    "OperationParams",
    "OperationResult",
    "PathKind",
    "RunContext",
    "get_operation",
    "jsonable",
    "operation_names",
    "params_model",
    "register_operation",
    "unregister_operation",
]

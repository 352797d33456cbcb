"""Cleaning operator registry: one module per operator (see base.py)."""

from __future__ import annotations

from training_platform.data.operators import (  # noqa: F401  (each import registers its operator)
    char_ratio,
    html_strip,
    length,
    pii,
    punctuation,
    repetition,
    turns,
    unicode_fix,
    whitespace,
)
from training_platform.data.operators.base import (
    OPERATORS,
    Filter,
    Mapper,
    OpContext,
    Operator,
    OpParams,
    register_operator,
)

__all__ = ["OPERATORS", "Filter", "Mapper", "OpContext", "OpParams", "Operator", "register_operator"]

"""The engines: one package per engine (`trl/`, `verl/`), each an Engine class and a builder module that registers
its `(engine, algorithm)` builders in `training/engine_registry.py` (re-exported here)."""

from __future__ import annotations

from training_platform.training.engine_registry import (
    ENGINES,
    LAUNCHERS,
    Builder,
    Capabilities,
    builders,
    capability_table,
    engines_for,
    get_builder,
    get_engine,
    register_builder,
    require_builder,
)
from training_platform.training.engines.base import Engine, EngineResult

__all__ = [
    "ENGINES",
    "LAUNCHERS",
    "Builder",
    "Capabilities",
    "Engine",
    "EngineResult",
    "builders",
    "capability_table",
    "engines_for",
    "get_builder",
    "get_engine",
    "register_builder",
    "require_builder",
]

"""The engines: one package per engine (`trl/`, `verl/`), each an Engine class and a builder module that registers
its `(engine, algorithm)` builders in `training/engine_registry.py` (re-exported here). `get_engine` lives here,
not in the registry: the registry is read by config validation and must not import the Engine seam (which names
the config)."""

from __future__ import annotations

import importlib

from training_platform.training.engine_registry import (
    ENGINE_CHECKS,
    ENGINES,
    LAUNCHERS,
    Builder,
    Capabilities,
    EngineChecks,
    builders,
    capability_table,
    engine_checks,
    engines_for,
    get_builder,
    register_builder,
    require_builder,
)
from training_platform.training.engines.base import Engine, EngineResult

__all__ = [
    "ENGINE_CHECKS",
    "ENGINES",
    "LAUNCHERS",
    "Builder",
    "Capabilities",
    "Engine",
    "EngineChecks",
    "EngineResult",
    "builders",
    "capability_table",
    "engine_checks",
    "engines_for",
    "get_builder",
    "get_engine",
    "register_builder",
    "require_builder",
]


def get_engine(name: str) -> Engine:
    """An instance of the Engine class named in ENGINES (its module is imported only now: to train)."""
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}; known: {', '.join(ENGINES)}")
    module, _, cls = ENGINES[name].partition(":")
    engine: Engine = getattr(importlib.import_module(module), cls)()
    return engine

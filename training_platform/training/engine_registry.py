"""Engine registry: `(engine, algorithm)` -> a builder with its capabilities, and `engine` -> the Engine class.

Adding an engine = a package under `engines/` whose builder module registers its builders with
`@register_builder(...)`, plus one line in ENGINES (its Engine class) and one in BUILDER_MODULES. Builder modules
must be light to import (no torch or engine at module level): config validation reads this table. It lives beside
`engines/`, not in it, so the config can read it without importing the engines (which read the config).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from training_platform.training.engines.base import Engine

LAUNCHERS = ("local", "torchrun", "ray")


@dataclass(frozen=True)
class Capabilities:
    """What an engine can do with one algorithm (shown by `tp algorithms list`, enforced by validation)."""

    resume: bool = True  # continue from a checkpoint (exact: same losses as the uninterrupted run)
    launchers: tuple[str, ...] = ("local",)  # process launchers it has been run and tested under
    model_kinds: tuple[str, ...] = ("causal_lm",)
    notes: str = ""
    # The engine's driver starts its own workers (verl RL on Ray): the runner calls it once, in its own process,
    # whatever the launcher, instead of starting ranks for it.
    own_workers: bool = False


@dataclass(frozen=True)
class Builder:
    engine: str
    algorithm: str
    build: Callable[[Any], Any]  # engine-specific context -> the engine's trainer
    capabilities: Capabilities


# engine name -> "module:Class" of its Engine (imported only to train).
ENGINES: dict[str, str] = {
    "trl": "training_platform.training.engines.trl.engine:TRLEngine",
    "verl": "training_platform.training.engines.verl.engine:VerlEngine",
}
# engine name -> the module whose import registers its builders.
BUILDER_MODULES: dict[str, str] = {
    "trl": "training_platform.training.engines.trl.builders",
    "verl": "training_platform.training.engines.verl.builders",
}

_BUILDERS: dict[tuple[str, str], Builder] = {}
_loaded = False


def register_builder(
    engine: str,
    algorithm: str,
    *,
    resume: bool = True,
    launchers: tuple[str, ...] = ("local",),
    model_kinds: tuple[str, ...] = ("causal_lm",),
    notes: str = "",
    own_workers: bool = False,
) -> Callable:
    """Decorator: `@register_builder("trl", "sft", launchers=("local", "torchrun"))` over `build(ctx) -> trainer`."""
    unknown = set(launchers) - set(LAUNCHERS)
    if unknown:
        raise ValueError(f"unknown launcher(s) {sorted(unknown)}; known: {LAUNCHERS}")

    def wrap(build: Callable[[Any], Any]) -> Callable[[Any], Any]:
        key = (engine, algorithm)
        if key in _BUILDERS:
            raise ValueError(f"a builder for {key} is already registered")
        _BUILDERS[key] = Builder(
            engine, algorithm, build, Capabilities(resume, tuple(launchers), tuple(model_kinds), notes, own_workers)
        )
        return build

    return wrap


def builders() -> dict[tuple[str, str], Builder]:
    global _loaded
    if not _loaded:
        for module in BUILDER_MODULES.values():
            importlib.import_module(module)
        _loaded = True
    return _BUILDERS


def get_builder(engine: str, algorithm: str) -> Builder | None:
    return builders().get((engine, algorithm))


def require_builder(engine: str, algorithm: str) -> Builder:
    """The builder of a validated job's (engine, algorithm): config validation refuses a pair without one."""
    builder = get_builder(engine, algorithm)
    if builder is None:
        raise ValueError(f"engine {engine!r} has no builder for {algorithm!r} (the config was not validated)")
    return builder


def engines_for(algorithm: str) -> list[str]:
    return sorted(engine for engine, name in builders() if name == algorithm)


def get_engine(name: str) -> Engine:
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}; known: {', '.join(ENGINES)}")
    module, _, cls = ENGINES[name].partition(":")
    return getattr(importlib.import_module(module), cls)()


def capability_table() -> list[dict[str, Any]]:
    """One row per (engine, algorithm), for `tp algorithms list` and the API."""
    from training_platform.training.algorithms import ALGORITHMS

    rows = []
    for (engine, algorithm), builder in sorted(builders().items()):
        spec = ALGORITHMS[algorithm]
        caps = builder.capabilities
        rows.append(
            {
                "engine": engine,
                "algorithm": algorithm,
                "data_kind": spec.data_kind,
                "resume": caps.resume,
                "launchers": list(caps.launchers),
                "model_kinds": list(caps.model_kinds),
                "rewards": spec.uses_reward_functions,
                "description": spec.description,
                "notes": caps.notes,
            }
        )
    return rows

"""Engine registry: `(engine, algorithm)` -> a builder with its capabilities, and `engine` -> the Engine class.

Adding an engine = a package under `engines/` whose builder module registers its builders with
`@register_builder(...)`, plus one line in ENGINES (its Engine class) and one in BUILDER_MODULES (and, when it
checks more than the shared layers, one in ENGINE_CHECKS: its `EngineChecks`). Builder and checks modules
must be light to import (no torch or engine at module level): config validation reads this table. It lives beside
`engines/`, not in it, so the config can read it without importing the engines (which read the config).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

LAUNCHERS = ("local", "torchrun", "ray")
DEVICES = ("cuda", "cpu", "mps")


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
    # Devices it trains on (`resources.device`; `auto` picks among what is there).
    devices: tuple[str, ...] = DEVICES
    # data.sampling: its trainer draws the training rows through a sampler training/sampling.py can replace.
    sampling: bool = False
    # algorithm.reward_model_path must be set (TRL's PPO scores only with a reward model).
    requires_reward_model: bool = False
    # Without algorithm.reward_model_path it scores with the job's reward functions (verl's PPO), which it then needs;
    # with one, any reward functions named are added to the model's score.
    reward_functions_without_reward_model: bool = False
    # Its rollout is verl's agent loop, where the job's `agent:` tools plug in (multi-turn tool calling, issue 28).
    agent_loop: bool = False


@dataclass(frozen=True)
class Builder:
    engine: str
    algorithm: str
    build: Callable[[Any], Any]  # engine-specific context -> the engine's trainer
    capabilities: Capabilities
    # Engine-specific extras the engine reads for this algorithm (TRL: a `TRLHooks`: how the shared steps differ,
    # e.g. PPO's tokenized prompts and policy model); None: the engine's defaults.
    hooks: Any = None


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

# engine name -> "module:Class" of its EngineChecks (light: the API imports it); an engine without one checks nothing
# beyond the shared layers.
ENGINE_CHECKS: dict[str, str] = {
    "verl": "training_platform.training.engines.verl.engine_checks:VerlChecks",
}


class EngineChecks:
    """What an engine checks beyond the shared layers, so shared code never asks for an engine by name. Every hook
    defaults to nothing. `cfg` is a parsed JobConfig; problems are core.errors.FieldError lists."""

    def warnings(self, cfg: Any) -> list[str]:
        """What would run, but probably not as meant (POST /jobs/validate)."""
        return []

    def config_problems(self, cfg: Any) -> list[Any]:
        """Problems found without reading files: the engine's own config generated from the job (API validate)."""
        return []

    def preflight_problems(self, cfg: Any, rows: dict[str, Any], *, dry_run: bool) -> list[Any]:
        """Layer 3, once the shared checks passed: `rows` maps a data field to its loaded rows (first item)."""
        return []

    def plan(self, cfg: Any, output: Any) -> str:
        """What a dry run shows beyond the effective config (e.g. the engine's generated config)."""
        return ""


def engine_checks(name: str) -> EngineChecks:
    target = ENGINE_CHECKS.get(name)
    if target is None:
        return EngineChecks()
    module, _, cls = target.partition(":")
    checks: EngineChecks = getattr(importlib.import_module(module), cls)()
    return checks


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
    devices: tuple[str, ...] = DEVICES,
    sampling: bool = False,
    requires_reward_model: bool = False,
    reward_functions_without_reward_model: bool = False,
    agent_loop: bool = False,
    hooks: Any = None,
) -> Callable:
    """Decorator: `@register_builder("trl", "sft", launchers=("local", "torchrun"))` over `build(ctx) -> trainer`."""
    unknown = set(launchers) - set(LAUNCHERS)
    if unknown:
        raise ValueError(f"unknown launcher(s) {sorted(unknown)}; known: {LAUNCHERS}")
    unknown = set(devices) - set(DEVICES)
    if unknown:
        raise ValueError(f"unknown device(s) {sorted(unknown)}; known: {DEVICES}")
    capabilities = Capabilities(
        resume=resume,
        launchers=tuple(launchers),
        model_kinds=tuple(model_kinds),
        notes=notes,
        own_workers=own_workers,
        devices=tuple(devices),
        sampling=sampling,
        requires_reward_model=requires_reward_model,
        reward_functions_without_reward_model=reward_functions_without_reward_model,
        agent_loop=agent_loop,
    )

    def wrap(build: Callable[[Any], Any]) -> Callable[[Any], Any]:
        key = (engine, algorithm)
        if key in _BUILDERS:
            raise ValueError(f"a builder for {key} is already registered")
        _BUILDERS[key] = Builder(engine, algorithm, build, capabilities, hooks)
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


def sampling_engines() -> list[str]:
    """Engines with at least one algorithm that supports data.sampling."""
    return sorted({engine for (engine, _), b in builders().items() if b.capabilities.sampling})


def sampling_algorithms(engine: str) -> list[str]:
    """The algorithms `engine` runs with data.sampling, in registration order."""
    return [name for (e, name), b in builders().items() if e == engine and b.capabilities.sampling]


def agent_loop_pairs() -> list[tuple[str, str]]:
    """The (engine, algorithm) pairs whose rollout runs the agent loop (`agent:` jobs), in registration order."""
    return [key for key, b in builders().items() if b.capabilities.agent_loop]


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

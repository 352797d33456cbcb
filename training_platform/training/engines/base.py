"""The engine seam: how a validated job config becomes a trained model.

An engine (TRL in each process today; verl on Ray next) registers one builder per algorithm it supports, keyed
`(engine, algorithm)`, with its capabilities. The runner talks to it through `Engine.train`, handing it the two
engine-neutral pieces: a RunWriter (metric rows, checkpoints, the manifest; only rank 0 writes) and a StopSignal
(the platform's stop, agreed by every rank). Nothing here imports torch or an engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from training_platform.training.config import JobConfig
    from training_platform.training.distributed import DistContext
    from training_platform.training.run_writer import RunWriter
    from training_platform.training.rundir import RunDir
    from training_platform.training.stop_signal import StopSignal

LAUNCHERS = ("local", "torchrun", "ray")


@dataclass
class EngineResult:
    step: int
    stopped: str | None  # the stop reason, or None when training ran to the end
    summary: dict = field(default_factory=dict)


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


class Engine(Protocol):
    name: str

    def train(
        self,
        cfg: JobConfig,
        run: RunDir,
        *,
        loaded: dict,
        resume_from: Path | None,
        stop: StopSignal,
        writer: RunWriter,
        dist: DistContext,
    ) -> EngineResult: ...

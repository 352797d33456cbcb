"""The engine seam: how a validated job config becomes a trained model.

An engine (TRL in each process today; verl on Ray next) registers one builder per algorithm it supports, keyed
`(engine, algorithm)`, with its capabilities. The runner talks to it through `Engine.train`, handing it the two
engine-neutral pieces: a RunWriter (metric rows, checkpoints, the manifest; only rank 0 writes) and a StopSignal
(the platform's stop, agreed by every rank). Nothing here imports torch or an engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from training_platform.training.config import JobConfig
    from training_platform.training.distributed import DistContext
    from training_platform.training.run_writer import RunWriter
    from training_platform.training.rundir import RunDir
    from training_platform.training.stop_signal import StopSignal


@dataclass
class EngineResult:
    step: int
    stopped: str | None  # the stop reason, or None when training ran to the end
    summary: dict = field(default_factory=dict)


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

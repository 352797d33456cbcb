"""The engine seam: how a validated job config becomes a trained model.

`trl` runs the algorithms in-process with TRL/transformers. A `verl` engine (Ray cluster, vLLM rollouts) plugs in
here with the same `train()` contract, so the runner, the CLI and the workers never change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from training_platform.training.callbacks import StopCallback
    from training_platform.training.config import JobConfig
    from training_platform.training.rundir import RunDir


@dataclass
class EngineResult:
    step: int
    stopped: str | None  # the stop reason, or None when training ran to the end
    summary: dict = field(default_factory=dict)


class Engine(Protocol):
    name: str

    def train(self, cfg: JobConfig, run: RunDir, *, loaded: dict, resume_from: Path | None,
              stopper: StopCallback) -> EngineResult: ...

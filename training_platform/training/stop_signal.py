"""StopSignal: the platform's stop request, agreed by every rank.

Engine-neutral. A stop comes from a signal (Ctrl-C, SIGTERM), the run directory's STOP file (written by the
platform's worker on cancel, and by the `tp train` driver for its ranks) or `--stop-at-step`. Engines call
`poll(step)` at the end of every optimizer step on every rank; with several ranks the local answers are combined
by `agree` (an all-reduce MAX supplied by the launcher's process group), so either every rank stops after the same
step or none does: one rank leaving the loop alone would leave the others waiting in a collective forever.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("training_platform.train")


class TrainingStopped(Exception):
    """Raised after the stop checkpoint is saved by trainers whose loop ignores a stop request (TRL's PPO)."""


class StopSignal:
    def __init__(
        self,
        stop_file: Path | None = None,
        *,
        stop_at_step: int | None = None,
        agree: Callable[[bool], bool] | None = None,
    ):
        self.stop_file = stop_file
        self.stop_at_step = stop_at_step
        self.agree = agree  # any(flag over all ranks); None: one process
        self.reason: str | None = None  # a stop asked for here (maybe not agreed yet)
        self.stopped: str | None = None  # the stop every rank agreed on: the run stops after this step

    def request_stop(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
            log.warning("stop requested (%s): stopping after this step with a checkpoint", reason)

    def _local(self, step: int) -> bool:
        if self.stop_file is not None and self.stop_file.exists():
            self.request_stop("STOP file")
        if self.stop_at_step is not None and step >= self.stop_at_step:
            self.request_stop(f"stop at step {self.stop_at_step}")
        return self.reason is not None

    def poll(self, step: int) -> str | None:
        """After optimizer step `step`: the stop reason when the run must stop now (on every rank), else None.
        The answer is the agreed one: a request that arrives while the ranks compare flags counts at the next
        step, on all of them."""
        if self.stopped is not None:
            return self.stopped
        local = self._local(step)
        agreed = local if self.agree is None else self.agree(local)
        if agreed:
            self.stopped = self.reason or "stop requested on another rank"
            if self.reason is None:
                log.warning("stop agreed across ranks after step %d", step)
        return self.stopped

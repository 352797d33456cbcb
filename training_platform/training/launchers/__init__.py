"""Launchers own the processes of a run: `local` (this process), `torchrun` (a process group on this node), `ray`
(Ray Train workers across nodes).

`resolve` (the config's `resolve_launcher`) turns `launcher: auto` into the concrete one: local for one process,
torchrun for several on one node, ray when the job spans nodes. The runner prepares the run directory, then either
trains in-process (local) or hands the ranks to a launcher, which waits for them, forwards a stop through the STOP
file and names a rank that failed.
"""

from __future__ import annotations

from dataclasses import dataclass

from training_platform.training.config import resolve_launcher as resolve

__all__ = ["LaunchOutcome", "resolve"]


@dataclass
class LaunchOutcome:
    """How the ranks ended: ok, or the first failed rank (rank, exit code, error message)."""

    returncode: int
    failed_rank: int | None = None
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0

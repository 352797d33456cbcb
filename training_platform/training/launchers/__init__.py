"""Launchers own the processes of a run: `local` (this process), `torchrun` (a process group on this node).

`resolve(resources)` turns `launcher: auto` into the concrete one: local for one process, torchrun for several on
one node, ray when the job spans nodes. The runner prepares the run directory, then either trains in-process
(local) or hands the ranks to a launcher, which waits for them, forwards a stop through the STOP file and names a
rank that failed.
"""

from __future__ import annotations

from dataclasses import dataclass


def resolve(launcher: str, *, num_nodes: int, num_devices: int) -> str:
    if launcher != "auto":
        return launcher
    if num_nodes > 1:
        return "ray"
    return "torchrun" if num_devices > 1 else "local"


@dataclass
class LaunchOutcome:
    """How the ranks ended: ok, or the first failed rank (rank, exit code, error message)."""

    returncode: int
    failed_rank: int | None = None
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0

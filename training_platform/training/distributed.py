"""Where this process sits in a run: rank, world size, launcher, and the two collectives the core needs.

Engine-neutral: torch is imported only when a process group is used. One process is `DistContext()` (rank 0 of 1,
no collectives). Under torchrun or Ray Train the launcher's environment (RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR/PORT) describes the process; `init()` joins the group (gloo on CPU,
nccl on CUDA) so that a stop is agreed (`any`) and checkpoints are fenced (`barrier`) by every rank.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass
class DistContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    node_rank: int = 0
    launcher: str = "local"
    backend: str | None = None  # set once the process group is initialised
    owns_group: bool = False  # we created it (torchrun); Ray Train creates and destroys its own

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @classmethod
    def from_env(cls, launcher: str = "torchrun") -> DistContext:
        """Read the environment torchrun / Ray Train give each rank (one process when WORLD_SIZE is unset)."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1:
            return cls(launcher=launcher if launcher != "torchrun" else "local")
        return cls(
            rank=int(os.environ["RANK"]),
            world_size=world,
            local_rank=int(os.environ.get("LOCAL_RANK", "0")),
            local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
            node_rank=int(os.environ.get("GROUP_RANK", os.environ.get("NODE_RANK", "0"))),
            launcher=launcher,
        )

    def init(self, device: str) -> None:
        """Join the process group (idempotent): nccl when this rank trains on CUDA, gloo otherwise."""
        if not self.distributed:
            return
        import torch.distributed as dist

        if not dist.is_initialized():
            backend = "nccl" if device == "cuda" else "gloo"
            if device == "cuda":
                import torch

                torch.cuda.set_device(self.local_rank)
            dist.init_process_group(backend=backend)
            self.owns_group = True
        self.backend = dist.get_backend()

    def _tensor(self, value: int):
        import torch

        device = f"cuda:{self.local_rank}" if self.backend == "nccl" else "cpu"
        return torch.tensor([value], dtype=torch.int32, device=device)

    def any(self, flag: bool) -> bool:
        """True on every rank when it is True on at least one (an all-reduce MAX)."""
        if not self.distributed:
            return flag
        import torch.distributed as dist

        t = self._tensor(int(flag))
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def barrier(self) -> None:
        if self.distributed:
            import torch.distributed as dist

            dist.barrier()

    def close(self) -> None:
        if self.distributed and self.owns_group:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()

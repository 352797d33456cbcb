"""verl's two sides of the `hf` rollout, registered by plugin.py:

- `HFReplica` (driver side, `RolloutReplicaRegistry["hf"]`): starts one HFRolloutServer actor per replica on the
  node of the actor worker it serves (verl's hybrid mode: one replica per actor rank when the rollout's tensor
  parallel size is 1), named as verl's adapters look servers up (`hf_server_<replica>_<node>`);
- `HFServerAdapter` (worker side, `_ROLLOUT_REGISTRY[("hf", "async")]`): lives in the actor worker; after every
  actor update verl hands it the full weights (every rank walks the generator: FSDP gathers each tensor with a
  collective), and the rank that owns the replica pushes them to its server in buckets through Ray's object store.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import ray
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica

log = logging.getLogger("training_platform.train")

SERVER_PREFIX = "hf_"


def server_name(replica_rank: int, node_rank: int, suffix: str = "") -> str:
    return f"{SERVER_PREFIX}server_{replica_rank}_{node_rank}{suffix}"


class HFReplica(RolloutReplica):
    def rollout_worker_use_gpu(self) -> bool:
        import torch

        return torch.cuda.is_available()

    async def launch_servers(self) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from training_platform.training.engines.verl.hf_rollout.server import HFRolloutServer

        if self.world_size != 1:
            raise ValueError(
                "the hf rollout serves one model copy per replica: set the rollout's tensor/data/pipeline "
                f"parallel sizes to 1 (got a replica world size of {self.world_size})"
            )
        node_id = await self.workers[0].__ray_call__.remote(lambda _: ray.get_runtime_context().get_node_id())
        config, model = self.config, self.model_config
        kind = "reward_" if self.is_reward_model else "teacher_" if self.is_teacher_model else ""
        name = f"{SERVER_PREFIX}server_{kind}{self.replica_rank}_0{self.name_suffix}"
        env = {k: os.environ[k] for k in ("VERL_USE_EXTERNAL_MODULES", "TP_DATA_DIR") if k in os.environ}
        server = (
            ray.remote(HFRolloutServer)
            .options(
                name=name,
                num_cpus=0,
                max_concurrency=self.max_concurrency,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
                runtime_env={"env_vars": env},
            )
            .remote(
                str(model.get("local_path") or model.get("path")),
                dtype=str(config.dtype),
                trust_remote_code=bool(model.get("trust_remote_code", False)),
                prompt_length=int(config.prompt_length),
                response_length=int(config.response_length),
                max_model_len=config.max_model_len,
                max_batch=int(config.max_num_seqs),
            )
        )
        await server.get_stats.remote()  # loaded (raises the server's error here)
        self.servers: list[Any] = [server]
        self._server_handle = server
        self._server_address = name  # no HTTP: verl's router only keys its servers by this


class HFServerAdapter(BaseRollout):
    def __init__(self, config, model_config, device_mesh, replica_rank: int = -1, **kwargs: Any):
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", 0))
        size = (
            self.config.tensor_model_parallel_size
            * self.config.data_parallel_size
            * self.config.pipeline_model_parallel_size
        )
        self.replica_rank = rank // size if replica_rank == -1 else replica_rank
        self.owns_server = rank % size == 0
        self.bucket_bytes = int(self.config.checkpoint_engine.update_weights_bucket_megabytes) << 20
        self._server: Any = None

    def _handle(self):
        if self._server is None:
            self._server = ray.get_actor(server_name(self.replica_rank, 0))
        return self._server

    async def resume(self, tags: list[str]) -> None:
        return None  # the server's model stays loaded

    async def release(self) -> None:
        return None

    async def update_weights(self, weights, wire_format: str = "named_tensors", **kw: Any):
        global_steps = kw.get("global_steps")
        if wire_format != "named_tensors":
            raise ValueError(f"the hf rollout takes full named tensors, not {wire_format!r}")
        if kw.get("peft_config") is not None:
            raise ValueError("the hf rollout takes merged weights: set actor_rollout_ref.model.lora.merge=true")
        sends, bucket, size = [], [], 0
        for name, tensor in weights:  # every rank iterates: FSDP's full_tensor() is a collective
            if not self.owns_server:
                continue
            tensor = tensor.detach().to("cpu").clone()
            bucket.append((name, tensor))
            size += tensor.numel() * tensor.element_size()
            if size >= self.bucket_bytes:
                sends.append(self._handle().update_weights.remote(bucket))
                bucket, size = [], 0
        if not self.owns_server:
            return
        if bucket:
            sends.append(self._handle().update_weights.remote(bucket))
        await asyncio.gather(*sends)
        await self._handle().finish_weights_update.remote(global_steps)

    def generate_sequences(self, prompts):
        raise NotImplementedError("the hf rollout serves verl's agent loop (async mode) only")

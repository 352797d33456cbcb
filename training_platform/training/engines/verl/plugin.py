"""What every verl process of a platform run imports first (verl's `VERL_USE_EXTERNAL_MODULES` hook, set through
the Ray runtime env by rl.py): the driver, the task runner, the actor / critic / reference workers, the agent-loop
and reward workers and the rollout servers.

- always: our trainer as verl's `sync` trainer (trainer.py: verl's plus per-function reward metrics) and the `hf`
  rollout in verl's registries (`RolloutReplicaRegistry["hf"]` for the driver side,
  `_ROLLOUT_REGISTRY[("hf", "async")]` for the worker side), and our agent loop `platform_tool_agent`
  (agent/loop.py) in verl's agent-loop registry;
- without CUDA: the CPU platform (cpu.py: gloo, verl's FSDP engines on the CPU, Ray's logical GPUs as the
  accelerator verl counts) and the patches of verl the CPU path needs (patches/).
"""

from __future__ import annotations

MODULE = "training_platform.training.engines.verl.plugin"
ADAPTER = "training_platform.training.engines.verl.hf_rollout.replica.HFServerAdapter"


def _load_replica():
    from training_platform.training.engines.verl.hf_rollout.replica import HFReplica

    return HFReplica


def register_hf_rollout() -> None:
    from verl.workers.rollout import base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    RolloutReplicaRegistry.register("hf", _load_replica)
    base._ROLLOUT_REGISTRY[("hf", "async")] = ADAPTER


def install() -> None:
    import torch

    if not torch.cuda.is_available():
        from training_platform.training.engines.verl import cpu
        from training_platform.training.engines.verl.patches import apply_all

        cpu.install()
        apply_all()
    register_hf_rollout()
    from training_platform.training.engines.verl import trainer

    trainer.install()
    from training_platform.training.engines.verl.agent import loop  # noqa: F401 - registers platform_tool_agent


install()

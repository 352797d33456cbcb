"""verl builders: what `engine: verl` trains, with its capabilities. Each builder turns a job into verl's config
(`generate.generate`); light to import (config validation reads this table): verl is imported only to build.

SFT runs verl's SFT trainer in our ranks (any launcher). The RL family runs verl's own sync PPO trainer, whose driver
starts its own Ray workers on a Ray this process starts (`local`; tests/training/test_verl_rl.py runs each algorithm
on the CPU). Its rollout is `hf` (transformers, anywhere) or vLLM / SGLang on GPUs (`verl.rollout`, auto picks).
The `ray` launcher (a cluster of TP_RAY_ADDRESS) is not declared for RL: no test runs it (docs/engines.md).
verl runs on cuda or cpu (not mps); its PPO scores with the job's reward functions when it names no reward model.
"""

from __future__ import annotations

from typing import TypedDict

from training_platform.training.engines import register_builder

RL_NOTES = "verl's sync trainer; rollout hf (transformers, CPU or GPU) or vLLM/SGLang (GPUs)"
DEVICES = ("cuda", "cpu")


def _generate(cfg_and_paths):
    from training_platform.training.engines.verl.generate import generate

    cfg, paths = cfg_and_paths
    return generate(cfg, paths)


register_builder(
    "verl",
    "sft",
    launchers=("local", "torchrun", "ray"),
    devices=DEVICES,
    notes="verl's SFT trainer (FSDP2); runs on CPU too",
)(_generate)


class _RLOptions(TypedDict):
    launchers: tuple[str, ...]
    own_workers: bool
    devices: tuple[str, ...]
    agent_loop: bool


# verl's RL rollout is its agent loop (mapping.py: rollout.mode async), where `agent:` tools plug in.
_RL: _RLOptions = {"launchers": ("local", "ray"), "own_workers": True, "devices": DEVICES, "agent_loop": True}
register_builder("verl", "grpo", notes=f"loss_type, GSPO (importance_sampling_level: sequence); {RL_NOTES}", **_RL)(
    _generate
)
register_builder("verl", "rloo", notes=RL_NOTES, **_RL)(_generate)
register_builder(
    "verl", "ppo", notes=f"GAE with a critic; {RL_NOTES}", reward_functions_without_reward_model=True, **_RL
)(_generate)
register_builder(
    "verl", "reinforce_pp", notes=f"REINFORCE++ (baseline: true for the -baseline variant); {RL_NOTES}", **_RL
)(_generate)

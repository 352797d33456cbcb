"""verl builders: what `engine: verl` trains, with its capabilities. Each builder turns a job into verl's config
(`generate.generate`); light to import (config validation reads this table): verl is imported only to build.

SFT runs verl's SFT trainer in our ranks (any launcher). The RL family runs verl's PPO trainer, whose driver starts
its own Ray workers: `local` starts a Ray on this machine, `ray` uses TP_RAY_ADDRESS. Its rollouts need GPUs with
vLLM or SGLang; preflight says so on a machine without them (configs still generate and dry-run anywhere).
"""

from __future__ import annotations

from typing import TypedDict

from training_platform.training.engines import register_builder

RL_NOTES = "needs GPUs with vLLM or SGLang (rollouts); dry-runs anywhere"


def _generate(cfg_and_paths):
    from training_platform.training.engines.verl.generate import generate

    cfg, paths = cfg_and_paths
    return generate(cfg, paths)


register_builder(
    "verl", "sft", launchers=("local", "torchrun", "ray"), notes="verl's SFT trainer (FSDP2); runs on CPU too"
)(_generate)


class _RLOptions(TypedDict):
    launchers: tuple[str, ...]
    own_workers: bool


_RL: _RLOptions = {"launchers": ("local", "ray"), "own_workers": True}
register_builder("verl", "grpo", notes=f"loss_type, GSPO (importance_sampling_level: sequence); {RL_NOTES}", **_RL)(
    _generate
)
register_builder("verl", "rloo", notes=RL_NOTES, **_RL)(_generate)
register_builder("verl", "ppo", notes=f"GAE with a critic; {RL_NOTES}", **_RL)(_generate)
register_builder(
    "verl", "reinforce_pp", notes=f"REINFORCE++ (baseline: true for the -baseline variant); {RL_NOTES}", **_RL
)(_generate)

"""The verl engine: where a job's verl files live in its run directory and the verl config it runs.

Run directory (beside what every engine writes):
    verl_config.yaml        the generated verl config (mapping.py), as composed and checked
    verl/train.parquet      data.train_file converted to verl's schema (val.parquet for the eval data)
    verl/reward_fn.py       RL: the custom_reward_function verl calls (the job's reward functions and weights)
    verl/checkpoints/       verl's global_step_N, registered as checkpoints/step_NNNNNN
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from training_platform.training.engines.verl.mapping import VerlPaths

if TYPE_CHECKING:  # pragma: no cover
    from omegaconf import DictConfig

    from training_platform.training.config import JobConfig

PLACEHOLDER_RUN_DIR = "<run_dir>"


def planned_paths(cfg: JobConfig, run_dir: Path | None) -> VerlPaths:
    """The files the verl config points at, under `run_dir` (a placeholder when there is none yet: dry run)."""
    from training_platform.training.preflight import resolve_model_ref

    base = f"{run_dir if run_dir is not None else PLACEHOLDER_RUN_DIR}/verl"
    algorithm = cfg.algorithm
    critic = reward_model = None
    if algorithm.name == "ppo":
        critic = resolve_model_ref(algorithm.value_model_path)[0] if algorithm.value_model_path else None
        reward_model = resolve_model_ref(algorithm.reward_model_path)[0] if algorithm.reward_model_path else None
    return VerlPaths(
        model=resolve_model_ref(cfg.model.path)[0],
        train_files=f"{base}/train.parquet",
        val_files=f"{base}/val.parquet" if cfg.has_eval() else None,
        local_dir=f"{base}/checkpoints",
        reward_module=f"{base}/reward_fn.py" if algorithm.name != "sft" and cfg.rewards else None,
        critic_model=critic,
        reward_model=reward_model,
    )


def verl_config(cfg: JobConfig, paths: VerlPaths) -> DictConfig:
    from training_platform.training.engines import get_builder

    return get_builder("verl", cfg.algorithm.name).build((cfg, paths))


class VerlEngine:
    name = "verl"

    def train(self, cfg, run, *, loaded, resume_from, stop, writer, dist):
        # Preflight refuses to start engine verl until its runner lands (issue 13's next slice); never reached.
        raise RuntimeError("training with engine verl is not available in this build (tp train --dry-run)")

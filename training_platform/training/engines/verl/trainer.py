"""verl's synchronous v1 PPO trainer with what its metrics and rollout dumps leave out: each reward function's value.
Our reward module returns them per sample (rewards.py: `rewards/<name>`, the llm_judge's rates); verl keeps them in
the sample's `extra_fields["reward_extra_info"]` in its TransferQueue, and its v1 trainer neither logs nor dumps
them. Here:

- metrics: `rewards/<name>/mean` and `/std` per step (TRL's names), the judge's rates as their mean;
- rollout dumps (`trainer.rollout_data_dir`): each row also carries `rewards/<name>`, so rollouts.jsonl has them.

It also waits less: verl's sync replay buffer checks for finished rollouts every 2 s (not configurable), which on
a small model is most of a step; here every 50 ms.

plugin.py installs it as verl's `sync` trainer in every verl process of a platform run (a subclass: the sync
trainer's behaviour is unchanged; verl branches on the mode's name, so it must keep the name `sync`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import transfer_queue as tq
from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

MODE = "sync"
POLL_S = 0.05
EXTRA_PREFIXES = ("rewards/", "judge/")  # what rewards.py adds beside the total score


def reward_extras(extra_fields: list[Any]) -> list[dict[str, float]]:
    """Each sample's numeric reward extras (our module's `rewards/<name>` and judge rates)."""
    out = []
    for fields in extra_fields:
        info = fields.get("reward_extra_info", {}) if isinstance(fields, dict) else {}
        out.append(
            {
                k: float(v)
                for k, v in info.items()
                if k.startswith(EXTRA_PREFIXES) and isinstance(v, int | float) and not isinstance(v, bool)
            }
        )
    return out


def extras_metrics(extras: list[dict[str, float]]) -> dict[str, float]:
    """Per-step means (and stds for reward functions) of the samples' extras."""
    keys = sorted({key for sample in extras for key in sample})
    metrics: dict[str, float] = {}
    for key in keys:
        values = np.array([s[key] for s in extras if key in s and math.isfinite(s[key])], dtype=np.float64)
        if not len(values):
            continue
        if key.startswith("rewards/"):
            metrics[f"{key}/mean"] = float(values.mean())
            metrics[f"{key}/std"] = float(values.std())
        else:
            metrics[key] = float(values.mean())
    return metrics


class PlatformSyncTrainer(PPOTrainerSync):
    def _build_replay_buffer(self):
        buffer = super()._build_replay_buffer()
        buffer.poll_interval = min(buffer.poll_interval, POLL_S)
        return buffer

    def _sample_extras(self, batch) -> list[dict[str, float]]:
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"])
        return reward_extras(list(data.pop("extra_fields").tolist()))

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        padding = [bool(tag.get("is_padding", False)) for tag in batch.tags]
        extras = [e for e, pad in zip(self._sample_extras(batch), padding, strict=True) if not pad]
        metrics.update(extras_metrics(extras))

    def _log_rollout_data(self, batch, timing_raw, rollout_data_dir):
        self._extras_by_key = dict(zip(batch.keys, self._sample_extras(batch), strict=True))
        try:
            super()._log_rollout_data(batch, timing_raw, rollout_data_dir)
        finally:
            self._extras_by_key = {}

    def _dump_generations(self, inputs, outputs, gts, scores, reward_extra_infos_dict, dump_path):
        by_key = getattr(self, "_extras_by_key", {})
        uids = reward_extra_infos_dict.get("uid") or []
        columns = sorted({k for key in uids for k in by_key.get(key, {}) if k.startswith("rewards/")})
        for column in columns:
            reward_extra_infos_dict[column] = [by_key.get(key, {}).get(column) for key in uids]
        return super()._dump_generations(inputs, outputs, gts, scores, reward_extra_infos_dict, dump_path)


def install() -> None:
    """verl's `sync` trainer becomes ours (register_trainer refuses a second class under one name)."""
    if TRAINER_REGISTRY.get(MODE) is not PlatformSyncTrainer:
        if not issubclass(PlatformSyncTrainer, TRAINER_REGISTRY[MODE]):
            raise RuntimeError(f"verl's {MODE!r} trainer is {TRAINER_REGISTRY[MODE]!r}, not the class ours extends")
        TRAINER_REGISTRY[MODE] = PlatformSyncTrainer

"""verl's synchronous v1 PPO trainer with what its metrics and rollout dumps leave out: each reward function's value.
Our reward module returns them per sample (rewards.py: `rewards/<name>`, the llm_judge's rates); verl keeps them in
the sample's `extra_fields["reward_extra_info"]` in its TransferQueue, and its v1 trainer neither logs nor dumps
them. Here:

- metrics: `rewards/<name>/mean` and `/std` per step (TRL's names), the judge's rates as their mean;
- rollout dumps (`trainer.rollout_data_dir`): each row also carries `rewards/<name>`, so rollouts.jsonl has them.

An agent run (`agent:`, engines/verl/agent/loop.py) also leaves each episode's record in `extra_fields`: the step
then logs `agent/turns/mean`, `agent/tool_calls/mean`, `agent/tool_error_rate` (errors / calls),
`agent/tool_latency_s/mean`, `agent/cut_ratio`, `agent/malformed_calls/mean` and `agent/loss_mask_mismatch` (the
samples whose loss mask, as the actor trains on it, does not count exactly the tokens the model generated: tool
output in the loss, or generated tokens out of it; 0 in a correct run), and the dumps carry the episode's turns
and counts (`agent_turns`, `agent/tool_calls`, `agent/tool_errors`).

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
AGENT_COUNTS = ("agent/turns", "agent/tool_calls", "agent/tool_errors", "agent/tool_latency_s", "agent/cut")
AGENT_DUMP = ("agent_turns", "agent/tool_calls", "agent/tool_errors")  # the dump columns rl.py reads back


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


def _count(value: Any) -> float | None:
    if isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool):
        number = float(value)
        return number if math.isfinite(number) else None
    return None


def agent_records(extra_fields: list[Any], mask_sums: list[Any] | None = None) -> list[dict[str, Any]]:
    """Each sample's agent episode: the loop's counts (`agent/*`), its turns (`agent_turns`) and, given the sample's
    loss-mask sum, whether it differs from the generated tokens the loop counted (`agent/loss_mask_mismatch`, 0/1).
    {} for a sample no agent loop made."""
    out: list[dict[str, Any]] = []
    for i, fields in enumerate(extra_fields):
        if not isinstance(fields, dict) or "agent/turns" not in fields:
            out.append({})
            continue
        record: dict[str, Any] = {
            k: c for k in (*AGENT_COUNTS, "agent/malformed_calls") if (c := _count(fields.get(k))) is not None
        }
        turns = fields.get("agent_turns")
        record["agent_turns"] = list(turns) if isinstance(turns, list | tuple) else []
        generated = _count(fields.get("agent/generated_tokens"))
        if mask_sums is not None and generated is not None:
            record["agent/loss_mask_mismatch"] = float(_count(mask_sums[i]) != generated)
        out.append(record)
    return out


def agent_metrics(records: list[dict[str, Any]]) -> dict[str, float]:
    """A step's agent metrics from its samples' episodes (none when no sample was an agent episode)."""
    episodes = [r for r in records if "agent/turns" in r]
    if not episodes:
        return {}

    def values(key: str) -> np.ndarray:
        return np.array([r[key] for r in episodes if key in r], dtype=np.float64)

    metrics: dict[str, float] = {}
    for key, name in (
        ("agent/turns", "agent/turns/mean"),
        ("agent/tool_calls", "agent/tool_calls/mean"),
        ("agent/tool_latency_s", "agent/tool_latency_s/mean"),
        ("agent/malformed_calls", "agent/malformed_calls/mean"),
        ("agent/cut", "agent/cut_ratio"),
    ):
        if len(found := values(key)):
            metrics[name] = float(found.mean())
    calls, errors = values("agent/tool_calls").sum(), values("agent/tool_errors").sum()
    metrics["agent/tool_error_rate"] = float(errors / calls) if calls else 0.0
    if len(mismatch := values("agent/loss_mask_mismatch")):
        metrics["agent/loss_mask_mismatch"] = float(mismatch.sum())
    return metrics


def mask_sums(mask: Any) -> list[float]:
    """Per-sample sums of a loss mask as TransferQueue returns it (a jagged nested tensor, or a padded one)."""
    if getattr(mask, "is_nested", False):
        return [float(m.sum()) for m in mask.unbind()]
    return [float(v) for v in mask.sum(dim=-1).tolist()]


class PlatformSyncTrainer(PPOTrainerSync):
    def _build_replay_buffer(self):
        buffer = super()._build_replay_buffer()
        buffer.poll_interval = min(buffer.poll_interval, POLL_S)
        return buffer

    def _sample_extras(self, batch) -> list[dict[str, float]]:
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"])
        return reward_extras(list(data.pop("extra_fields").tolist()))

    def _sample_agent(self, batch, *, loss_mask: bool) -> list[dict[str, Any]]:
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"])
        fields = list(data.pop("extra_fields").tolist())
        if not loss_mask or not any(isinstance(f, dict) and "agent/generated_tokens" in f for f in fields):
            return agent_records(fields)
        mask = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["loss_mask"])
        return agent_records(fields, mask_sums(mask["loss_mask"]))

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        padding = [bool(tag.get("is_padding", False)) for tag in batch.tags]
        extras = [e for e, pad in zip(self._sample_extras(batch), padding, strict=True) if not pad]
        metrics.update(extras_metrics(extras))
        agent = [a for a, pad in zip(self._sample_agent(batch, loss_mask=True), padding, strict=True) if not pad]
        metrics.update(agent_metrics(agent))

    def _log_rollout_data(self, batch, timing_raw, rollout_data_dir):
        self._extras_by_key = dict(zip(batch.keys, self._sample_extras(batch), strict=True))
        self._agent_by_key = dict(zip(batch.keys, self._sample_agent(batch, loss_mask=False), strict=True))
        try:
            super()._log_rollout_data(batch, timing_raw, rollout_data_dir)
        finally:
            self._extras_by_key = {}
            self._agent_by_key = {}

    def _dump_generations(self, inputs, outputs, gts, scores, reward_extra_infos_dict, dump_path):
        by_key = getattr(self, "_extras_by_key", {})
        uids = reward_extra_infos_dict.get("uid") or []
        columns = sorted({k for key in uids for k in by_key.get(key, {}) if k.startswith("rewards/")})
        for column in columns:
            reward_extra_infos_dict[column] = [by_key.get(key, {}).get(column) for key in uids]
        agent = getattr(self, "_agent_by_key", {})
        if any(agent.get(key) for key in uids):
            for column in AGENT_DUMP:
                reward_extra_infos_dict[column] = [agent.get(key, {}).get(column) for key in uids]
        return super()._dump_generations(inputs, outputs, gts, scores, reward_extra_infos_dict, dump_path)


def install() -> None:
    """verl's `sync` trainer becomes ours (register_trainer refuses a second class under one name)."""
    if TRAINER_REGISTRY.get(MODE) is not PlatformSyncTrainer:
        if not issubclass(PlatformSyncTrainer, TRAINER_REGISTRY[MODE]):
            raise RuntimeError(f"verl's {MODE!r} trainer is {TRAINER_REGISTRY[MODE]!r}, not the class ours extends")
        TRAINER_REGISTRY[MODE] = PlatformSyncTrainer

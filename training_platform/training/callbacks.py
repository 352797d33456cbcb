"""Trainer callbacks shared by every algorithm: metrics to metrics.jsonl, checkpoints into the run layout, and a
clean stop (signal, STOP file or a step limit) that always leaves a checkpoint behind."""

from __future__ import annotations

import json
import logging
import math
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from transformers import TrainerCallback

from training_platform.training.rundir import RunDir, checkpoint_name

log = logging.getLogger("training_platform.train")

KEY_RENAMES = {"learning_rate": "lr"}
# Logged once by Trainer at the end of training; they belong in run.json, not in the per-step series.
SUMMARY_KEYS = {"train_samples_per_second", "train_steps_per_second", "total_flos", "train_loss"}


class TrainingStopped(Exception):
    """Raised after the stop checkpoint is saved by trainers whose loop ignores `should_training_stop` (PPO)."""


def _memory_used_mb() -> float:
    try:
        import torch

        if torch.cuda.is_available():
            return round(torch.cuda.max_memory_allocated() / 2**20, 1)
    except Exception:  # noqa: BLE001
        pass
    import psutil

    return round(psutil.Process().memory_info().rss / 2**20, 1)


class MetricsCallback(TrainerCallback):
    """One JSON object per logging step: step, epoch, ts, loss, lr, grad_norm, sec_per_step, tokens_per_sec,
    mem_used_mb, plus whatever the algorithm logs (kl, rewards/*, logps/*, clip ratios, ...)."""

    def __init__(self, run: RunDir, *, loss_from: Callable[[dict], float | None] | None = None):
        self.run = run
        self.loss_from = loss_from
        self.summary: dict = {}
        self._last_time: float | None = None
        self._last_step = 0
        self._last_tokens: float | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        self._last_time = time.perf_counter()
        self._last_step = state.global_step
        self._last_tokens = None

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = dict(logs or {})
        if SUMMARY_KEYS & set(logs):  # the end-of-training summary, not a step's metrics
            self.summary.update({k: v for k, v in logs.items() if isinstance(v, int | float)})
            return
        if not logs or set(logs) <= {"epoch"}:
            return
        now = time.perf_counter()
        step = state.global_step
        record: dict = {"step": step, "epoch": logs.pop("epoch", state.epoch), "ts": round(time.time(), 3)}
        is_eval = any(k.startswith("eval_") for k in logs)
        if not is_eval:
            if "loss" not in logs and self.loss_from is not None:
                derived = self.loss_from(logs)
                if derived is not None:
                    logs["loss"] = derived
            steps = step - self._last_step
            elapsed = now - (self._last_time or now)
            record["sec_per_step"] = round(elapsed / steps, 6) if steps > 0 else None
            tokens = logs.get("num_tokens", getattr(state, "num_input_tokens_seen", 0) or None)
            if tokens is not None and self._last_tokens is not None and elapsed > 0:
                record["tokens_per_sec"] = round((tokens - self._last_tokens) / elapsed, 2)
            else:
                record["tokens_per_sec"] = None
            self._last_tokens = tokens
            self._last_time, self._last_step = now, step
            record["mem_used_mb"] = _memory_used_mb()
        nonfinite = []
        for key, value in logs.items():
            key = KEY_RENAMES.get(key, key)
            if isinstance(value, float) and not math.isfinite(value):
                nonfinite.append(key)
                value = None  # JSON has no NaN; the key list below keeps the fact visible
            if isinstance(value, int | float | str | bool) or value is None:
                record[key] = value
        if nonfinite:
            record["nonfinite"] = nonfinite
            log.warning("non-finite metrics at step %d: %s", step, ", ".join(nonfinite))
        with self.run.metrics_file.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        log.info("metrics %s", json.dumps(record))


class CheckpointCallback(TrainerCallback):
    """Moves Trainer's `checkpoint-N` into `checkpoints/step_NNNNNN`, points `latest` at it, hashes its files into
    the manifest and keeps the last N (plus pinned ones: see RunDir.pin)."""

    def __init__(self, run: RunDir, keep_last: int):
        self.run = run
        self.keep_last = keep_last

    def on_save(self, args, state, control, **kwargs):
        step = state.global_step
        src = Path(args.output_dir) / f"checkpoint-{step}"
        if not src.is_dir():
            return
        dst = self.run.checkpoints / checkpoint_name(step)
        if dst.exists():
            shutil.rmtree(dst)
        src.rename(dst)
        (Path(args.output_dir) / "README.md").unlink(missing_ok=True)  # TRL's model card template, not ours
        self.run.set_latest(dst)
        self.run.record_tree("checkpoint", dst, step=step)
        for old in self.run.checkpoint_dirs()[: -self.keep_last]:
            if self.run.is_pinned(old):  # being evaluated, or the best so far: kept beyond keep_last
                continue
            shutil.rmtree(old)
            self.run.record_removed(old)
        self.run.update_run_info(last_checkpoint=dst.name, step=step)
        log.info("checkpoint saved: %s", dst)


class StopCallback(TrainerCallback):
    """Stops cleanly after the current step when asked (signal, STOP file, `stop_at_step`), saving a checkpoint
    first. Also makes sure the last step of a run is checkpointed."""

    def __init__(self, run: RunDir, *, stop_at_step: int | None = None, raise_on_stop: bool = False):
        self.run = run
        self.stop_at_step = stop_at_step
        self.raise_on_stop = raise_on_stop
        self.reason: str | None = None

    def request_stop(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
            log.warning("stop requested (%s): stopping after this step with a checkpoint", reason)

    def on_step_end(self, args, state, control, **kwargs):
        if self.run.stop_file.exists():
            self.request_stop("STOP file")
        if self.stop_at_step is not None and state.global_step >= self.stop_at_step:
            self.request_stop(f"stop at step {self.stop_at_step}")
        if self.reason is not None:
            control.should_save = True
            control.should_training_stop = True
        elif state.max_steps and state.global_step >= state.max_steps:
            control.should_save = True  # the final step always has a checkpoint
        return control

    def on_save(self, args, state, control, **kwargs):
        if self.reason is not None and self.raise_on_stop:
            raise TrainingStopped(self.reason)

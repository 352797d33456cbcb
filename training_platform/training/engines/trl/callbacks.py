"""transformers callbacks that adapt the Trainer to the engine-neutral core: metric rows to the RunWriter, saved
checkpoints into the run layout (fenced by a barrier so every rank has finished writing its files), and the
StopSignal polled at every step end on every rank (it agrees the stop across ranks)."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from pathlib import Path

from transformers import TrainerCallback

from training_platform.training.distributed import DistContext
from training_platform.training.run_writer import RunWriter
from training_platform.training.stop_signal import StopSignal, TrainingStopped

log = logging.getLogger("training_platform.train")

KEY_RENAMES = {"learning_rate": "lr"}
# Logged once by Trainer at the end of training; they belong in run.json, not in the per-step series.
SUMMARY_KEYS = {"train_samples_per_second", "train_steps_per_second", "total_flos", "train_loss"}


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

    def __init__(self, writer: RunWriter, *, loss_from: Callable[[dict], float | None] | None = None):
        self.writer = writer
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
        if not self.writer.is_main:  # every rank logs the same (already reduced) values: rank 0 writes them
            return
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
        self.writer.log_metrics(record)


class CheckpointCallback(TrainerCallback):
    """Trainer's `checkpoint-N` becomes `checkpoints/step_NNNNNN` (RunWriter: hashed into the manifest and rotated
    in the background). Every rank waits at a barrier first: under DDP each rank writes its own RNG state into the
    directory, and rank 0 must not move it before they are done; and again after, so no rank saves the next one
    into a directory that is being moved."""

    def __init__(self, writer: RunWriter, dist: DistContext):
        self.writer = writer
        self.dist = dist

    def on_save(self, args, state, control, **kwargs):
        step = state.global_step
        self.dist.barrier()
        if self.writer.is_main:
            (Path(args.output_dir) / "README.md").unlink(missing_ok=True)  # TRL's model card template, not ours
            self.writer.checkpoint_saved(step, Path(args.output_dir) / f"checkpoint-{step}")
        self.dist.barrier()


class StopCallback(TrainerCallback):
    """Polls the StopSignal after every optimizer step on every rank; an agreed stop saves a checkpoint, then ends
    the loop. Also makes sure the last step of a run is checkpointed."""

    def __init__(self, stop: StopSignal, *, raise_on_stop: bool = False):
        self.stop = stop
        self.raise_on_stop = raise_on_stop

    def on_step_end(self, args, state, control, **kwargs):
        if self.stop.poll(state.global_step) is not None:
            control.should_save = True
            control.should_training_stop = True
        elif state.max_steps and state.global_step >= state.max_steps:
            control.should_save = True  # the final step always has a checkpoint
        return control

    def on_save(self, args, state, control, **kwargs):
        if self.stop.stopped is not None and self.raise_on_stop:
            raise TrainingStopped(self.stop.stopped)

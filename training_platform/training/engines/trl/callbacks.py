"""transformers callbacks that adapt the Trainer to the engine-neutral core: metric rows to the RunWriter, saved
checkpoints into the run layout (fenced by a barrier so every rank has finished writing its files), and the
StopSignal polled at every step end on every rank (it agrees the stop across ranks)."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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

    def __init__(
        self,
        writer: RunWriter,
        *,
        loss_from: Callable[[dict], float | None] | None = None,
        extra: Callable[[], dict] | None = None,
    ):
        self.writer = writer
        self.loss_from = loss_from
        self.extra = extra  # more metrics for each training row (the llm_judge counters: rewards/llm_judge.py)
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
            if self.extra is not None:
                logs.update(self.extra())
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


class RolloutCallback(TrainerCallback):
    """GRPO / RLOO: at each training logging step, a sample of the latest generation batch goes to rollouts.jsonl.

    The rows are TRL's own record of that batch (`trainer._logs`, which TRL fills in
    `_generate_and_score_completions` and prints / tables with `log_completions`): prompt and completion text, each
    reward function's value (NaN where it returned None), the advantage TRL trained on; gathered from every rank.
    The total is the weighted sum TRL logs as `reward` (reward_weights, NaN ignored). `trainer._metrics["train"]`
    counts the training generations since the last log (TRL clears it after `on_log`): a log without a new
    generation, or whose batch an evaluation has overwritten since, keeps nothing rather than a stale batch."""

    def __init__(self, rollouts):
        self.rollouts = rollouts
        self.trainer = None
        self._generations_at_eval: int | None = None

    def bind(self, trainer) -> None:
        logs, metrics = getattr(trainer, "_logs", None), getattr(trainer, "_metrics", None)
        if not (
            isinstance(logs, dict)
            and {"prompt", "completion", "rewards", "advantages"} <= set(logs)
            and isinstance(metrics, dict)
            and "train" in metrics
            and hasattr(trainer, "reward_func_names")
        ):
            import trl

            raise RuntimeError(
                f"{type(trainer).__name__} (TRL {trl.__version__}) does not keep its generations in "
                "_logs/_metrics as TRL 1.x does: rollouts cannot be captured; set "
                "training.rollout_samples_per_step: 0 to train without them"
            )
        self.trainer = trainer

    def _train_generations(self) -> int:
        assert self.trainer is not None  # on_log asks only once bind() has set it
        return len(self.trainer._metrics["train"].get("reward", ()))

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.trainer is None or not self.rollouts.enabled:
            return
        logs = logs or {}
        if any(k.startswith("eval_") for k in logs):  # an evaluation filled _logs with its own generations
            self._generations_at_eval = self._train_generations()
            return
        if SUMMARY_KEYS & set(logs) or not logs:
            return
        generations = self._train_generations()
        stale = self._generations_at_eval is not None and generations <= self._generations_at_eval
        self._generations_at_eval = None
        if generations == 0 or stale:
            return
        from training_platform.training.rollouts import rollout_row

        batch = self.trainer._logs
        prompts, completions, advantages = list(batch["prompt"]), list(batch["completion"]), list(batch["advantages"])
        names = list(self.trainer.reward_func_names)
        per_function = {name: list(batch["rewards"].get(name, ())) for name in names}
        weights = [float(w) for w in self.trainer.reward_weights.tolist()]
        rows = []
        for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
            values = {name: per_function[name][i] if i < len(per_function[name]) else None for name in names}
            scored = [
                (w, v) for w, v in zip(weights, values.values(), strict=True) if v is not None and math.isfinite(v)
            ]
            total = sum(w * v for w, v in scored) if scored else None
            rows.append(
                rollout_row(
                    state.global_step, prompt, completion, values, total, advantages[i] if i < len(advantages) else None
                )
            )
        self.rollouts.write_step(state.global_step, rows)


class PPORolloutCallback(TrainerCallback):
    """PPO (TRL experimental): every completion scored by the reward model since the last log, to rollouts.jsonl.

    TRL's PPO loop keeps its batch in local variables; the one place that sees each query, its truncated response and
    the reward model's score is `get_reward(reward_model, query + response, pad, context_length)`, which this wraps
    (in the PPO trainer's module, for this process, restored when training ends). The total is the score after
    TRL's `missing_eos_penalty` (a response without EOS), as in `objective/scores`; advantages are per token in PPO
    (GAE), so `advantage` is null. Rank 0's own completions are kept (PPO runs as one process here)."""

    def __init__(self, rollouts, tokenizer, *, missing_eos_penalty: float | None):
        self.rollouts = rollouts
        self.tokenizer = tokenizer
        self.missing_eos_penalty = missing_eos_penalty
        self.trainer = None
        self._module: Any = None  # TRL's ppo_trainer module (its get_reward is swapped while training)
        self._original: Callable[..., Any] | None = None
        self._pending: list[tuple[list[int], list[int], bool, float]] = []

    def bind(self, trainer) -> None:
        import trl.experimental.ppo.ppo_trainer as module

        original = getattr(module, "get_reward", None)
        if original is None or not hasattr(trainer, "reward_model"):
            import trl

            raise RuntimeError(
                f"TRL {trl.__version__}'s PPO trainer does not score through get_reward(reward_model, "
                "...): rollouts cannot be captured; set training.rollout_samples_per_step: 0"
            )
        self.trainer, self._module, self._original = trainer, module, original
        if not self.rollouts.enabled:
            return

        def get_reward(model, query_responses, pad_token_id, context_length):
            out = original(model, query_responses, pad_token_id, context_length)
            assert self.trainer is not None  # set above, before this wrapper is installed; never unset
            if model is self.trainer.reward_model and self.rollouts.enabled:
                self._capture(query_responses, pad_token_id, context_length, out[1])
            return out

        module.get_reward = get_reward

    def _capture(self, query_responses, pad_token_id: int, context_length: int, scores) -> None:
        eos = self.tokenizer.eos_token_id
        queries = query_responses[:, :context_length].tolist()
        responses = query_responses[:, context_length:].tolist()
        for query, response, score in zip(queries, responses, scores.float().tolist(), strict=True):
            # TRL's EOS test runs on the padded response (pad may be the EOS token itself), as here
            self._pending.append(
                (
                    [t for t in query if t != pad_token_id],
                    [t for t in response if t != pad_token_id],
                    eos in response,
                    score,
                )
            )

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not self._pending:
            return
        from training_platform.training.rollouts import rollout_row

        pending, self._pending = self._pending, []
        rows = []
        for query, response, has_eos, score in pending:
            total = score
            if self.missing_eos_penalty is not None and not has_eos:
                total = score - self.missing_eos_penalty
            rows.append(
                rollout_row(
                    state.global_step,
                    self.tokenizer.decode(query, skip_special_tokens=True),
                    self.tokenizer.decode(response, skip_special_tokens=True),
                    {"reward_model": score},
                    total,
                    None,
                )
            )
        self.rollouts.write_step(state.global_step, rows)

    def on_train_end(self, args, state, control, **kwargs):
        if self._module is not None and self._original is not None:
            self._module.get_reward = self._original

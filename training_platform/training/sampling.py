"""Difficulty-aware sampling of training rows (`data.sampling`).

Buckets: every training row gets the difficulty bucket of the audit/gate report (data/report.py:
`difficulty_features` -> `difficulty_scores` -> `bucket_of`, cut-offs 1/3 and 2/3), computed at training start over
the rows the trainer trains on (after `eval_split`).

The stream: an endless, deterministic (seeded) sequence of row indices, built in blocks. A block is what the whole
job consumes at once: one micro-batch of every rank (SFT and the other Trainer-based algorithms: per-device batch x
world size) or the unique prompts of one generation (GRPO / RLOO). Each block's stage (its mix) comes from the
optimizer step it belongs to. Inside a block, the bucket of each slot is chosen by priority: a bucket's priority is
how far its drawn count is behind its target share (cumulative, carried across blocks, so a share that does not
divide the block is met over a few blocks); the slots are then shuffled. Rows within a bucket come from a seeded
permutation of that bucket, reshuffled each time it is used up (every row of a bucket is seen before any repeats).

Ranks: every rank builds the same stream (same seed); accelerate's BatchSamplerShard (Trainer's DataLoader under
DDP) hands rank r the micro-batches r, r + W, ... of it, so each rank sees its share and the ranks' shares are
disjoint slots of one stream. `shard_indices` does the same slicing for code that shards by itself.

Epochs: `set_epoch(e)` (accelerate forwards Trainer's call; `SamplerEpochCallback` also sets it, since a resumed
run's skipping loader does not forward it) makes an epoch the positions [e * len, (e + 1) * len) of the stream, so a
curriculum keeps counting steps across epochs and a resume continues the same stream.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from training_platform.data.report import BUCKETS, bucket_of, difficulty_features, difficulty_scores

THRESHOLDS = (1 / 3, 2 / 3)
MAX_RECORDED_STEPS = 100_000


def row_buckets(rows: Sequence[Any], fmt: str | None = None) -> np.ndarray:
    """0 easy, 1 medium, 2 hard per row: the audit report's difficulty buckets over these rows."""
    from training_platform.data.formats import detect_format

    if len(rows) == 0:
        return np.zeros(0, dtype=np.int64)
    if fmt is None and isinstance(rows[0], dict):
        fmt = detect_format(rows[0])
    features: dict[str, list[int]] = {}
    for row in rows:
        for name, value in difficulty_features(row, fmt).items():
            features.setdefault(name, []).append(value)
    scores = difficulty_scores({k: np.asarray(v, dtype=np.float64) for k, v in features.items()})
    return bucket_of(scores, THRESHOLDS).astype(np.int64)


def _shares(mix: dict[str, float]) -> np.ndarray:
    return np.array([float(mix.get(b, 0.0)) for b in BUCKETS], dtype=np.float64)


class SamplingPlan:
    """The stages of a strategy: the mix in force at each optimizer step (1-based, as Trainer logs it)."""

    def __init__(
        self, strategy: str, mix: dict[str, float] | None = None, schedule: Sequence[tuple[int, dict[str, float]]] = ()
    ):
        if strategy not in ("mix", "curriculum"):
            raise ValueError(f"data.sampling.strategy: the sampler draws for mix or curriculum, not {strategy!r}")
        self.stages: list[tuple[int | None, np.ndarray]]
        if strategy == "mix":
            if mix is None:
                raise ValueError("data.sampling.mix: required for strategy mix")
            self.stages = [(None, _shares(mix))]
        else:
            if not schedule:
                raise ValueError("data.sampling.schedule: strategy curriculum needs at least one stage")
            self.stages = [(int(until), _shares(m)) for until, m in schedule]
        for _, shares in self.stages:
            if (shares < 0).any() or abs(shares.sum() - 1.0) > 1e-6:
                raise ValueError(f"data.sampling: a mix must have shares >= 0 summing to 1, got {shares.tolist()}")
        self.strategy = strategy

    @classmethod
    def from_config(cls, sampling: Any) -> SamplingPlan:
        return cls(
            sampling.strategy,
            sampling.mix.as_dict() if sampling.mix is not None else None,
            [(s.until_step, s.mix.as_dict()) for s in sampling.schedule],
        )

    def stage_of(self, step: int) -> int:
        for i, (until, _) in enumerate(self.stages):
            if until is None or step <= until:
                return i
        return len(self.stages) - 1

    def shares(self, step: int) -> np.ndarray:
        return self.stages[self.stage_of(step)][1]


class IndexStream:
    """The deterministic stream of row indices (see the module docstring)."""

    def __init__(self, buckets: np.ndarray, plan: SamplingPlan, *, seed: int, block_size: int, items_per_step: float):
        if block_size < 1 or items_per_step <= 0:
            raise ValueError(f"block_size ({block_size}) and items_per_step ({items_per_step}) must be positive")
        self.buckets = np.asarray(buckets, dtype=np.int64)
        self.members = [np.flatnonzero(self.buckets == k) for k in range(len(BUCKETS))]
        self.available = np.array([len(m) > 0 for m in self.members])
        if not self.available.any():
            raise ValueError("data.sampling: the training data has no rows")
        for i, (_, shares) in enumerate(plan.stages):
            if not (shares[self.available] > 0).any():
                where = "data.sampling.mix" if plan.strategy == "mix" else f"data.sampling.schedule[{i}].mix"
                raise ValueError(
                    f"{where}: asks only for buckets with no rows (rows per bucket: {self.bucket_counts()})"
                )
        self.plan = plan
        self.seed = int(seed)
        self.block_size = int(block_size)
        self.items_per_step = float(items_per_step)

    def bucket_counts(self) -> dict[str, int]:
        return {b: int(len(m)) for b, m in zip(BUCKETS, self.members, strict=True)}

    def effective_shares(self, shares: np.ndarray) -> np.ndarray:
        """A share asked of an empty bucket goes to the others, in proportion (recorded in sampling.json)."""
        s = np.where(self.available, shares, 0.0)
        return s / s.sum()

    def step_of_block(self, block: int) -> int:
        return int(math.floor(block * self.block_size / self.items_per_step + 1e-9)) + 1

    def blocks(self) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """(step, row indices, their buckets) per block, endlessly."""
        rng = np.random.default_rng(self.seed)
        perms = [rng.permutation(m) for m in self.members]
        cursor = [0, 0, 0]
        drawn = np.zeros(len(BUCKETS))
        target = np.zeros(len(BUCKETS))
        stage = None
        block = 0
        n = self.block_size
        while True:
            step = self.step_of_block(block)
            current = self.plan.stage_of(step)
            if current != stage:  # a new stage starts from its own targets
                stage = current
                drawn[:] = 0
                target[:] = 0
            shares = self.effective_shares(self.plan.stages[current][1])
            target += shares * n
            want = np.maximum(target - drawn, 0.0)
            counts = np.floor(want).astype(np.int64)
            while counts.sum() < n:  # priority: the bucket furthest behind its target
                gap = np.where(shares > 0, want - counts, -np.inf)
                counts[int(np.argmax(gap))] += 1
            while counts.sum() > n:
                over = np.where(counts > 0, counts - want, -np.inf)
                counts[int(np.argmax(over))] -= 1
            drawn += counts
            labels = np.repeat(np.arange(len(BUCKETS)), counts)
            rng.shuffle(labels)
            rows = np.empty(n, dtype=np.int64)
            for slot, k in enumerate(labels):
                if cursor[k] >= len(perms[k]):
                    perms[k] = rng.permutation(self.members[k])
                    cursor[k] = 0
                rows[slot] = perms[k][cursor[k]]
                cursor[k] += 1
            yield step, rows, labels
            block += 1

    def indices(self, start: int, stop: int) -> Iterator[int]:
        """Positions [start, stop) of the stream."""
        position = 0
        for _, rows, _ in self.blocks():
            end = position + len(rows)
            if end > start:
                for i in range(max(start - position, 0), min(len(rows), stop - position)):
                    yield int(rows[i])
            position = end
            if position >= stop:
                return

    def per_step_counts(self, steps: int) -> list[dict[str, int]]:
        """Rows drawn per optimizer step for steps 1..steps, by bucket (what the trainer is handed)."""
        out: list[np.ndarray] = [np.zeros(len(BUCKETS), dtype=np.int64) for _ in range(steps)]
        for step, _, labels in self.blocks():
            if step > steps:
                break
            out[step - 1] += np.bincount(labels, minlength=len(BUCKETS))
        return [{b: int(c[k]) for k, b in enumerate(BUCKETS)} for c in out]


def shard_indices(indices: Sequence[int], *, rank: int, world_size: int, batch_size: int) -> list[int]:
    """The micro-batches r, r + W, ... of a stream (accelerate's BatchSamplerShard, drop_last): rank r's share."""
    per_round = batch_size * world_size
    full = len(indices) - len(indices) % per_round
    out: list[int] = []
    for start in range(0, full, per_round):
        out.extend(indices[start + rank * batch_size : start + (rank + 1) * batch_size])
    return out


def _torch_sampler_base():
    from torch.utils.data import Sampler

    return Sampler


if TYPE_CHECKING:  # pragma: no cover
    from torch.utils.data import Sampler

    _SamplerBase = Sampler[int]
else:
    _SamplerBase = _torch_sampler_base()


class DifficultySampler(_SamplerBase):
    """Trainer's train sampler: one epoch is `length` positions of the stream."""

    def __init__(self, stream: IndexStream, length: int):
        self.stream = stream
        self.length = int(length)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Iterator[int]:
        start = self.epoch * self.length
        return self.stream.indices(start, start + self.length)


class DifficultyRepeatSampler(DifficultySampler):
    """GRPO / RLOO: TRL's RepeatSampler layout (each chunk of unique prompts repeated `repeat_count` times, each
    prompt `mini_repeat_count` times in a row) over the difficulty stream instead of a permutation."""

    def __init__(
        self, stream: IndexStream, num_rows: int, *, mini_repeat_count: int, batch_size: int, repeat_count: int
    ):
        self.chunks_per_epoch = num_rows // batch_size
        super().__init__(stream, self.chunks_per_epoch * batch_size)
        self.mini_repeat_count = mini_repeat_count
        self.batch_size = batch_size
        self.repeat_count = repeat_count

    def __len__(self) -> int:
        return self.length * self.mini_repeat_count * self.repeat_count

    def __iter__(self) -> Iterator[int]:
        start = self.epoch * self.length
        unique = list(self.stream.indices(start, start + self.length))
        for c in range(self.chunks_per_epoch):
            chunk = unique[c * self.batch_size : (c + 1) * self.batch_size]
            for _ in range(self.repeat_count):
                for index in chunk:
                    for _ in range(self.mini_repeat_count):
                        yield index


def sampling_record(stream: IndexStream, *, strategy: str, total_steps: int, world_size: int) -> dict[str, Any]:
    """What sampling.json holds: the buckets, the plan and the per-step bucket counts the sampler hands out."""
    steps = min(int(total_steps), MAX_RECORDED_STEPS)
    per_step = stream.per_step_counts(steps)
    stages = []
    for i, (until, shares) in enumerate(stream.plan.stages):
        if i == 0:
            first = 1
        else:
            previous = stream.plan.stages[i - 1][0]
            assert previous is not None  # several stages are a curriculum's, and each of them ends at a step
            first = previous + 1
        last = steps if until is None or i == len(stream.plan.stages) - 1 else min(int(until), steps)
        totals = (
            {b: sum(per_step[s - 1][b] for s in range(first, last + 1)) for b in BUCKETS}
            if first <= last
            else dict.fromkeys(BUCKETS, 0)
        )
        n = sum(totals.values())
        stages.append(
            {
                "until_step": until,
                "requested_mix": dict(zip(BUCKETS, shares.round(6).tolist(), strict=True)),
                "effective_mix": dict(zip(BUCKETS, stream.effective_shares(shares).round(6).tolist(), strict=True)),
                "steps": [first, last] if first <= last else None,
                "drawn": totals,
                "drawn_mix": {b: round(totals[b] / n, 6) if n else 0.0 for b in BUCKETS},
            }
        )
    return {
        "strategy": strategy,
        "seed": stream.seed,
        "thresholds": {"easy_below": THRESHOLDS[0], "hard_from": THRESHOLDS[1]},
        "rows": int(len(stream.buckets)),
        "bucket_rows": stream.bucket_counts(),
        "world_size": world_size,
        "block_size": stream.block_size,
        "rows_per_step": stream.items_per_step,
        "total_steps": int(total_steps),
        "recorded_steps": steps,
        "stages": stages,
        "per_step": per_step,
    }


# ---------------------------------------------------------------------------------------------- TRL integration

RL_REPEAT = ("grpo", "rloo")  # TRL trainers whose train sampler is a RepeatSampler


def _epoch_callback(sampler: DifficultySampler):
    from transformers import TrainerCallback

    class SamplerEpochCallback(TrainerCallback):
        """Sets the sampler's epoch from the trainer state (a resumed run's skipping loader does not forward it)."""

        def on_epoch_begin(self, args, state, control, **kwargs):
            sampler.set_epoch(int(math.floor((state.epoch or 0.0) + 1e-9)))

    return SamplerEpochCallback()


def install_sampler(cfg: Any, trainer: Any, buckets: np.ndarray, *, world_size: int) -> dict[str, Any]:
    """Replace the TRL trainer's train sampler by the difficulty sampler of `cfg.data.sampling`; returns the
    sampling.json record. `buckets` were computed over the rows the trainer was given, in its order."""
    s = cfg.data.sampling
    algorithm = cfg.spec.name
    t = cfg.training
    num_rows = len(trainer.train_dataset)
    if num_rows != len(buckets):
        raise RuntimeError(
            f"data.sampling: the trainer kept {num_rows} of the {len(buckets)} bucketed rows (its "
            f"preprocessing dropped or merged rows): rows cannot be drawn by difficulty"
        )
    seed = s.seed if s.seed is not None else t.seed
    plan = SamplingPlan.from_config(s)
    args = trainer.args
    if algorithm in RL_REPEAT:
        block = args.generation_batch_size // trainer.num_generations
        repeat = trainer.num_iterations * args.steps_per_generation
        items_per_step = block * t.gradient_accumulation_steps / repeat
        stream = IndexStream(buckets, plan, seed=seed, block_size=block, items_per_step=items_per_step)
        sampler: DifficultySampler = DifficultyRepeatSampler(
            stream, num_rows, mini_repeat_count=trainer.num_generations, batch_size=block, repeat_count=repeat
        )
        epoch_unique = sampler.length
    else:
        block = t.per_device_batch_size * world_size
        items_per_step = block * t.gradient_accumulation_steps
        stream = IndexStream(buckets, plan, seed=seed, block_size=block, items_per_step=items_per_step)
        sampler = DifficultySampler(stream, num_rows)
        epoch_unique = num_rows - (num_rows % block if world_size > 1 else 0)
    if t.max_steps is not None:
        total_steps = t.max_steps
    else:
        total_steps = max(1, math.ceil(t.num_epochs * max(epoch_unique // block, 1) * block / items_per_step))
    trainer._get_train_sampler = lambda dataset=None: sampler  # noqa: SLF001 - transformers' sampler hook
    trainer.add_callback(_epoch_callback(sampler))
    record = sampling_record(stream, strategy=s.strategy, total_steps=total_steps, world_size=world_size)
    record["sampler"] = type(sampler).__name__
    return record


def uniform_record(buckets: np.ndarray, *, seed: int, world_size: int) -> dict[str, Any]:
    counts = np.bincount(np.asarray(buckets, dtype=np.int64), minlength=len(BUCKETS))
    return {
        "strategy": "uniform",
        "seed": seed,
        "sampler": "trainer default (shuffled)",
        "thresholds": {"easy_below": THRESHOLDS[0], "hard_from": THRESHOLDS[1]},
        "rows": int(len(buckets)),
        "bucket_rows": {b: int(counts[k]) for k, b in enumerate(BUCKETS)},
        "world_size": world_size,
    }

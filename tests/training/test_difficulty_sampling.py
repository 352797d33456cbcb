"""Difficulty-aware sampling (data.sampling): config rules, bucket proportions, determinism, rank shards."""

from __future__ import annotations

import numpy as np
import pytest

from training_platform.training.config import ConfigError, check_rules, parse_config
from training_platform.training.sampling import (
    DifficultyRepeatSampler,
    DifficultySampler,
    IndexStream,
    SamplingPlan,
    row_buckets,
    sampling_record,
    shard_indices,
)

MIX = {"easy": 0.2, "medium": 0.4, "hard": 0.4}


def _cfg(sampling, **extra):
    raw = {
        "model": {"path": "m"},
        "data": {"train_file": "t.jsonl", "sampling": sampling},
        "algorithm": {"name": "sft"},
        **extra,
    }
    return parse_config(raw)


def test_config_rules_name_the_field():
    with pytest.raises(ConfigError) as exc:
        _cfg({"strategy": "mix", "mix": {"easy": 0.5, "hard": 0.4}})
    assert exc.value.errors[0].path == "data.sampling.mix" and "sum to 1" in exc.value.errors[0].reason
    paths = [
        e.path
        for e in check_rules(
            _cfg(
                {
                    "strategy": "curriculum",
                    "schedule": [{"until_step": 10, "mix": {"easy": 1}}, {"until_step": 10, "mix": MIX}],
                }
            )
        )
    ]
    assert paths == ["data.sampling.schedule[1].until_step"]
    assert [e.path for e in check_rules(_cfg({"strategy": "mix"}))] == ["data.sampling.mix"]
    assert [e.path for e in check_rules(_cfg({"strategy": "curriculum"}))] == ["data.sampling.schedule"]
    errs = check_rules(_cfg({"strategy": "mix", "mix": MIX}, engine="verl"))
    assert "data.sampling" in [e.path for e in errs]
    packing = parse_config(
        {
            "model": {"path": "m"},
            "data": {"train_file": "t.jsonl", "sampling": {"strategy": "mix", "mix": MIX}},
            "algorithm": {"name": "sft", "packing": True},
        }
    )
    assert "algorithm.packing" in [e.path for e in check_rules(packing)]
    assert check_rules(_cfg({"strategy": "mix", "mix": MIX})) == []


def _buckets(n=900, seed=0):
    return np.random.default_rng(seed).choice(3, size=n, p=[0.5, 0.3, 0.2])


def _shares(rows, buckets):
    counts = np.bincount(buckets[np.asarray(rows)], minlength=3)
    return counts / counts.sum()


def test_mix_proportions_and_determinism():
    buckets = _buckets()
    stream = IndexStream(buckets, SamplingPlan("mix", MIX), seed=7, block_size=10, items_per_step=20)
    sampler = DifficultySampler(stream, len(buckets))
    drawn = list(sampler)
    assert len(drawn) == len(buckets)
    np.testing.assert_allclose(_shares(drawn, buckets), [0.2, 0.4, 0.4], atol=0.01)
    for start in range(0, 900, 10):  # every block of 10 (one global micro-batch) follows the mix: 2/4/4
        assert np.bincount(buckets[drawn[start : start + 10]], minlength=3).tolist() == [2, 4, 4]
    assert drawn == list(
        DifficultySampler(
            IndexStream(buckets, SamplingPlan("mix", MIX), seed=7, block_size=10, items_per_step=20), len(buckets)
        )
    )
    other = list(
        DifficultySampler(
            IndexStream(buckets, SamplingPlan("mix", MIX), seed=8, block_size=10, items_per_step=20), len(buckets)
        )
    )
    assert other != drawn
    sampler.set_epoch(1)
    second = list(sampler)
    assert second != drawn and len(second) == len(drawn)
    hard = np.flatnonzero(buckets == 2)  # 0.4 of 900 draws = 360 from ~180 hard rows: each seen before repeats
    assert set(hard.tolist()) <= set(drawn)


def test_curriculum_proportions_per_stage():
    buckets = _buckets(3000, seed=1)
    plan = SamplingPlan(
        "curriculum",
        schedule=[
            (50, {"easy": 1.0}),
            (100, {"easy": 0.5, "medium": 0.5}),
            (150, {"easy": 0.1, "medium": 0.3, "hard": 0.6}),
        ],
    )
    stream = IndexStream(buckets, plan, seed=0, block_size=6, items_per_step=12)
    rows = list(stream.indices(0, 200 * 12))
    stages = [rows[0:600], rows[600:1200], rows[1200:2400]]  # steps 1-50, 51-100, 101-200 (the last continues)
    np.testing.assert_allclose(_shares(stages[0], buckets), [1, 0, 0])
    np.testing.assert_allclose(_shares(stages[1], buckets), [0.5, 0.5, 0], atol=0.01)
    np.testing.assert_allclose(_shares(stages[2], buckets), [0.1, 0.3, 0.6], atol=0.01)
    record = sampling_record(stream, strategy="curriculum", total_steps=200, world_size=1)
    assert [s["steps"] for s in record["stages"]] == [[1, 50], [51, 100], [101, 200]]
    assert record["stages"][2]["drawn_mix"] == pytest.approx({"easy": 0.1, "medium": 0.3, "hard": 0.6}, abs=0.01)
    assert sum(record["per_step"][0].values()) == 12


def test_empty_bucket_share_goes_to_the_others_or_is_refused():
    buckets = np.array([0] * 50 + [2] * 50)  # no medium rows
    stream = IndexStream(
        buckets, SamplingPlan("mix", {"easy": 0.5, "medium": 0.5}), seed=0, block_size=4, items_per_step=4
    )
    assert set(buckets[list(stream.indices(0, 40))].tolist()) == {0}
    with pytest.raises(ValueError, match=r"data.sampling.schedule\[0\].mix"):
        IndexStream(
            buckets, SamplingPlan("curriculum", schedule=[(5, {"medium": 1.0})]), seed=0, block_size=4, items_per_step=4
        )


def test_rank_shards_are_disjoint_and_cover_under_accelerate():
    from accelerate.data_loader import BatchSamplerShard
    from torch.utils.data import BatchSampler

    buckets = _buckets(400)
    stream = IndexStream(buckets, SamplingPlan("mix", MIX), seed=3, block_size=2 * 4, items_per_step=8)
    sampler = DifficultySampler(stream, len(buckets))
    full = list(sampler)
    shards = []
    for rank in range(2):  # what Trainer's DataLoader gives each rank under DDP (drop_last with several ranks)
        batches = BatchSamplerShard(
            BatchSampler(sampler, batch_size=4, drop_last=True), num_processes=2, process_index=rank
        )
        shard = [i for batch in batches for i in batch]
        assert shard == shard_indices(full, rank=rank, world_size=2, batch_size=4)
        shards.append(shard)
    merged = [i for step in range(50) for r in range(2) for i in shards[r][step * 4 : (step + 1) * 4]]
    assert merged == full  # the ranks' micro-batches interleave back into the one stream: disjoint, covering
    for step in range(50):  # every global micro-batch (both ranks together) follows the mix
        counts = np.bincount(buckets[merged[step * 8 : (step + 1) * 8]], minlength=3)
        assert abs(counts[0] - 1.6) <= 1 and abs(counts[1] - 3.2) <= 1 and abs(counts[2] - 3.2) <= 1


def test_repeat_sampler_keeps_trl_layout():
    buckets = _buckets(40)
    stream = IndexStream(buckets, SamplingPlan("mix", MIX), seed=0, block_size=3, items_per_step=3)
    sampler = DifficultyRepeatSampler(stream, 40, mini_repeat_count=2, batch_size=3, repeat_count=2)
    out = list(sampler)
    assert len(out) == len(sampler) == 13 * 3 * 2 * 2
    first = out[:12]
    assert first[:6] == first[6:] and first[0] == first[1] and first[2] == first[3]


def test_row_buckets_use_the_audit_features():
    rows = [
        {
            "messages": [
                {"role": "user", "content": " + ".join(["3"] * k) + " ="},
                {"role": "assistant", "content": str(3 * k)},
            ]
        }
        for k in (2, 2, 3, 3, 5, 5)
    ]
    assert row_buckets(rows).tolist() == [0, 0, 1, 1, 2, 2]

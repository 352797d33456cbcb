"""rollouts.jsonl: the engine-neutral writer (sampling, size cap, rank 0 only), its truncation on resume, and the
config fields that drive it."""

from __future__ import annotations

import json
import logging

import pytest

from training_platform.training.config import ConfigError, parse_config
from training_platform.training.rollouts import RolloutWriter, rollout_row
from training_platform.training.rundir import RunDir

pytestmark = pytest.mark.unit


@pytest.fixture
def run(tmp_path) -> RunDir:
    run = RunDir(tmp_path / "run")
    run.create()
    return run


def rows(step: int, n: int) -> list[dict]:
    return [
        rollout_row(
            step,
            f"prompt {i}",
            f"completion {step}.{i}",
            {"math_answer": float(i % 2), "fmt": None},
            0.5 * (i % 2),
            i - n / 2,
        )
        for i in range(n)
    ]


def kept(run: RunDir) -> list[dict]:
    if not run.rollouts_file.exists():
        return []
    return [json.loads(line) for line in run.rollouts_file.read_text().splitlines()]


def test_row_shape_and_non_finite_values_become_null():
    row = rollout_row(3, [{"role": "user", "content": "1+1="}], "2", {"a": float("nan"), "b": 1}, float("inf"), None)
    assert list(row) == ["step", "prompt", "completion", "rewards", "reward", "advantage"]
    assert row["prompt"] == '[{"role": "user", "content": "1+1="}]', "a conversational prompt: its messages as JSON"
    assert row["rewards"] == {"a": None, "b": 1.0} and row["reward"] is None and row["advantage"] is None


def test_each_step_keeps_a_seeded_sample_in_original_order(run):
    writer = RolloutWriter(run, samples_per_step=3, max_mb=1, seed=7)
    assert writer.write_step(1, rows(1, 10)) == 3
    assert writer.write_step(2, rows(2, 2)) == 2, "a step with fewer rollouts keeps them all"
    assert writer.write_step(3, []) == 0
    got = kept(run)
    assert [r["step"] for r in got] == [1, 1, 1, 2, 2]
    first = [r["completion"] for r in got if r["step"] == 1]
    assert first == sorted(first, key=lambda c: int(c.split(".")[1])), "kept in the order they were generated"
    assert got[0]["rewards"] == {"math_answer": got[0]["rewards"]["math_answer"], "fmt": None}
    # the same seed and step pick the same rollouts (a resumed run keeps the same ones)
    assert RolloutWriter(run, samples_per_step=3, max_mb=1, seed=7).sample(1, 10) == writer.sample(1, 10)
    assert writer.sample(1, 10) != writer.sample(4, 10) or writer.sample(1, 10) != writer.sample(5, 10)


def test_zero_samples_and_other_ranks_write_nothing(run):
    assert RolloutWriter(run, samples_per_step=0, max_mb=1).write_step(1, rows(1, 4)) == 0
    assert RolloutWriter(run, rank=1, samples_per_step=4, max_mb=1).write_step(1, rows(1, 4)) == 0
    assert not run.rollouts_file.exists()
    assert RolloutWriter(run, rank=0, samples_per_step=4, max_mb=1).write_step(1, rows(1, 4)) == 4


def test_the_size_cap_stops_writing_and_says_so_once(run, caplog):
    run.update_run_info(status="running")
    cap_mb = 2000 / 2**20  # 2000 bytes
    writer = RolloutWriter(run, samples_per_step=4, max_mb=cap_mb)
    with caplog.at_level(logging.ERROR, logger="training_platform.train"):
        written = [writer.write_step(step, rows(step, 4)) for step in range(1, 20)]
    assert written[0] == 4 and written[-1] == 0 and writer.capped and not writer.enabled
    assert run.rollouts_file.stat().st_size <= 2000
    capped_at = written.index(0) + 1
    assert [r["step"] for r in kept(run)][-1] == capped_at - 1, "whole steps only"
    messages = [r.getMessage() for r in caplog.records if "ROLLOUTS CAPPED" in r.getMessage()]
    assert len(messages) == 1 and "training.rollouts_max_mb" in messages[0]
    assert run.read_run_info()["rollouts_capped_at_step"] == capped_at


def test_resume_drops_rows_after_the_checkpoint(run):
    writer = RolloutWriter(run, samples_per_step=2, max_mb=1)
    for step in range(1, 6):
        writer.write_step(step, rows(step, 2))
    with run.rollouts_file.open("a") as f:
        f.write('{"step": 6, "prompt": "cut sho')  # a crash in the middle of a row
    assert run.truncate_rollouts_after(3) == 5
    assert [r["step"] for r in kept(run)] == [1, 1, 2, 2, 3, 3]
    assert RunDir(run.path / "none").truncate_rollouts_after(3) == 0


def test_config_fields_have_bounds():
    base = {
        "model": {"path": "demo/model"},
        "data": {"train_file": "demo/data/rl.jsonl"},
        "algorithm": {"name": "grpo", "num_generations": 2},
        "rewards": [{"name": "math_answer"}],
    }
    cfg = parse_config(base)
    assert cfg.training.rollout_samples_per_step == 8 and cfg.training.rollouts_max_mb == 100
    for field, value in (
        ("rollout_samples_per_step", -1),
        ("rollout_samples_per_step", 5000),
        ("rollouts_max_mb", 0),
        ("rollouts_max_mb", 10**6),
    ):
        with pytest.raises(ConfigError) as caught:
            parse_config({**base, "training": {field: value}})
        assert any(e.path == f"training.{field}" for e in caught.value.errors), caught.value

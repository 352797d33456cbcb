"""rollouts.jsonl from real RL training through the real CLI on the demo model: what TRL generated and scored at each
logging step, with the rewards its metrics report."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
from training_helpers import EXAMPLES, read_metrics

pytestmark = pytest.mark.integration

ALL = ["--set", "training.logging_steps=1", "--set", "training.rollout_samples_per_step=64"]


def rollouts(run) -> dict[int, list[dict]]:
    by_step: dict[int, list[dict]] = defaultdict(list)
    for line in (run / "rollouts.jsonl").read_text().splitlines():
        row = json.loads(line)
        by_step[row["step"]].append(row)
    return dict(by_step)


def mean(values) -> float:
    values = [v for v in values if v is not None]
    return sum(values) / len(values)


@pytest.mark.parametrize("algorithm", ["grpo"])  # RLOO (the same hook): the resume test below
def test_grpo_keeps_what_it_generated_with_the_logged_rewards(tp, tmp_path, algorithm):
    run = tmp_path / "run"
    tp(
        "train",
        EXAMPLES / f"{algorithm}_tiny.yaml",
        "--output",
        run,
        "--set",
        "training.max_steps=3",
        "--set",
        "training.save_steps=3",
        *ALL,
        check=0,
    )
    kept = rollouts(run)
    assert sorted(kept) == [1, 2, 3]
    functions = {"grpo": {"math_answer", "length_penalty"}, "rloo": {"math_answer"}}[algorithm]
    generations = {"grpo": 8, "rloo": 4}[algorithm]
    metrics = {m["step"]: m for m in read_metrics(run) if "reward" in m}
    for step, rows in kept.items():
        assert len(rows) == 16, "the whole generation batch (16 completions): fewer than the 64 asked for"
        assert all(set(r["rewards"]) == functions for r in rows)
        assert all(r["prompt"].strip() and isinstance(r["completion"], str) for r in rows)
        assert any(r["completion"].strip() for r in rows), "real completions"
        assert len({r["prompt"] for r in rows}) == 16 // generations, "each prompt's group of completions"
        # the rows are the batch TRL scored: the same means as its metrics of that step
        assert mean(r["reward"] for r in rows) == pytest.approx(metrics[step]["reward"], abs=1e-5)
        for name in functions:
            assert mean(r["rewards"][name] for r in rows) == pytest.approx(
                metrics[step][f"rewards/{name}/mean"], abs=1e-5
            )
        assert all(isinstance(r["advantage"], float) for r in rows)
        for i in range(0, 16, generations):  # advantages are centred within each prompt's group
            assert sum(r["advantage"] for r in rows[i : i + generations]) == pytest.approx(0, abs=1e-3)


def test_ppo_keeps_completions_with_the_reward_models_score(tp, tmp_path):
    run = tmp_path / "run"
    tp(
        "train",
        EXAMPLES / "ppo_tiny.yaml",
        "--output",
        run,
        "--set",
        "training.max_steps=2",
        "--set",
        "training.save_steps=2",
        *ALL,
        check=0,
    )
    kept = rollouts(run)
    metrics = {m["step"]: m for m in read_metrics(run) if "objective/scores" in m}
    assert sorted(kept) == [1, 2]
    for step, rows in kept.items():
        assert len(rows) == 8 and all(set(r["rewards"]) == {"reward_model"} and r["advantage"] is None for r in rows)
        assert any(r["completion"].strip() for r in rows)
        assert mean(r["reward"] for r in rows) == pytest.approx(metrics[step]["objective/scores"], abs=1e-5)


def test_a_resumed_rloo_run_keeps_each_step_once(tp, tmp_path):
    run = tmp_path / "run"
    args = [
        "--set",
        "training.max_steps=3",
        "--set",
        "training.save_steps=100",
        "--set",
        "training.rollout_samples_per_step=4",
        "--set",
        "training.logging_steps=1",
    ]
    tp("train", EXAMPLES / "rloo_tiny.yaml", "--output", run, *args, "--stop-at-step", "2", check=0)
    assert sorted(rollouts(run)) == [1, 2]
    tp("train", EXAMPLES / "rloo_tiny.yaml", "--resume", run, *args, check=0)
    kept = rollouts(run)
    assert sorted(kept) == [1, 2, 3] and all(len(rows) == 4 for rows in kept.values())
    rows = [r for step_rows in kept.values() for r in step_rows]
    assert all(set(r["rewards"]) == {"math_answer"} and isinstance(r["advantage"], float) for r in rows)

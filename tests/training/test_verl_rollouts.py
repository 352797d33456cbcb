"""verl RL rollouts: `trainer.rollout_data_dir` in the generated config, and verl's per-step dumps (written here by
verl's own `_write_generations`, v1 and v0 trainers) turned into rollouts.jsonl rows as the driver runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("verl")

from training_platform.training.engines.verl.rl import RolloutDumps  # noqa: E402
from training_platform.training.rollouts import RolloutWriter  # noqa: E402
from training_platform.training.rundir import RunDir  # noqa: E402

pytestmark = pytest.mark.unit

RL = {
    "model": {"path": "demo/model"},
    "data": {"train_file": "demo/data/rl.jsonl", "max_length": 64},
    "algorithm": {"name": "grpo", "num_generations": 4, "max_completion_length": 8},
    "rewards": [{"name": "math_answer"}],
    "training": {"max_steps": 5, "per_device_batch_size": 8},
    "resources": {"device": "cpu"},
    "engine": "verl",
}


def v1_dump(directory: Path, step: int, n: int) -> None:
    """What verl 0.9.1's v1 trainer (`use_v1: true`, the default) writes: input, output, gts, score, step, uid."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    PPOTrainer._write_generations(
        [f"user\n{i}+1=\nassistant\n" for i in range(n)],
        [f"{i + 1} (step {step})" for i in range(n)],
        [str(i + 1) for i in range(n)],
        [float(i % 2) for i in range(n)],
        {"uid": [f"p{i}_0_0" for i in range(n)]},
        str(directory),
        step,
    )


def v0_dump(directory: Path, step: int, n: int) -> None:
    """verl's v0 trainer (`use_v1: false`): the reward extras our reward module returns are dumped too."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    scores = [0.5 * (i % 2) for i in range(n)]
    RayPPOTrainer._write_generations(
        [f"q{i}" for i in range(n)],
        [f"a{i}" for i in range(n)],
        [None] * n,
        scores,
        {
            "rewards/math_answer": [2 * s for s in scores],
            "rewards/length_penalty": [0.0] * n,
            "score": scores,
            "request_id": [f"r{i}" for i in range(n)],
        },
        str(directory),
        step,
    )


def kept(run: RunDir) -> list[dict]:
    return (
        [json.loads(line) for line in run.rollouts_file.read_text().splitlines()] if run.rollouts_file.exists() else []
    )


def test_verls_dumps_become_sampled_rows_once_complete(tmp_path):
    run = RunDir(tmp_path / "run")
    run.create()
    dumps_dir = run.path / "verl" / "rollouts"
    dumps = RolloutDumps(dumps_dir, RolloutWriter(run, samples_per_step=3, max_mb=1), after_step=0)
    assert dumps.poll() == 0, "no dump yet"
    v1_dump(dumps_dir, 1, 8)
    assert dumps.poll() == 0, "the newest dump may still be being written"
    v1_dump(dumps_dir, 2, 8)
    assert dumps.poll() == 3 and not (dumps_dir / "1.jsonl").exists(), "converted, then removed"
    with (dumps_dir / "3.jsonl").open("w") as f:  # the driver was stopped while verl wrote step 3
        f.write(json.dumps({"input": "q", "output": "a", "gts": None, "score": 1.0, "step": 3}) + "\n")
        f.write('{"input": "q", "output": "cut')
    assert dumps.poll(final=True) == 4 and not list(dumps_dir.glob("*.jsonl"))
    rows = kept(run)
    assert [r["step"] for r in rows] == [1, 1, 1, 2, 2, 2, 3]
    first = rows[0]
    assert set(first) == {"step", "prompt", "completion", "rewards", "reward", "advantage"}
    assert first["prompt"].startswith("user\n") and first["completion"].endswith("(step 1)")
    assert first["rewards"] == {}, "verl's v1 trainer dumps the total only"
    assert first["reward"] == float(int(first["prompt"].split("\n")[1].split("+")[0]) % 2)
    assert first["advantage"] is None


def test_v0_dumps_carry_each_reward_function_and_a_resume_skips_kept_steps(tmp_path):
    run = RunDir(tmp_path / "run")
    run.create()
    dumps_dir = run.path / "verl" / "rollouts"
    v0_dump(dumps_dir, 1, 4)  # left by the attempt being resumed
    dumps = RolloutDumps(dumps_dir, RolloutWriter(run, samples_per_step=4, max_mb=1), after_step=2)
    dumps.clear()
    assert not dumps_dir.exists()
    for step in (2, 3):  # verl re-dumps the resumed checkpoint's step; only steps after it are new
        v0_dump(dumps_dir, step, 4)
    assert dumps.poll(final=True) == 4
    rows = kept(run)
    assert [r["step"] for r in rows] == [3] * 4
    assert rows[1]["rewards"] == {"math_answer": 1.0, "length_penalty": 0.0} and rows[1]["reward"] == 0.5


@pytest.fixture
def demo(tmp_path, monkeypatch):
    from training_platform.demo import prepare_demo

    prepare_demo(tmp_path / "data")
    monkeypatch.setenv("TP_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("TP_RAY_ADDRESS", raising=False)


def test_the_generated_config_asks_verl_for_its_dumps(demo):
    from omegaconf import OmegaConf

    from training_platform.training.engines.verl import engine
    from training_platform.training.preflight import validate_config

    def rollout_dir(samples: int):
        raw = {**RL, "training": {**RL["training"], "rollout_samples_per_step": samples}}
        cfg = validate_config(raw, dry_run=True)
        return OmegaConf.select(
            engine.verl_config(cfg, engine.planned_paths(cfg, Path("/runs/r1"))), "trainer.rollout_data_dir"
        )

    assert rollout_dir(8) == "/runs/r1/verl/rollouts"
    assert rollout_dir(0) is None, "0 keeps none: verl dumps nothing"

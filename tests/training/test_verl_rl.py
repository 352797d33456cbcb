"""engine: verl trains RL for real on this CPU: `tp train` runs verl's own driver (TaskRunner -> its sync trainer's
fit(): rollout, reward, advantage, actor and, for PPO, critic updates) on a private Ray, with the `hf` rollout
(transformers) taking the actor's weights after every update. Each run starts from a short SFT so rewards vary."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
import verl  # noqa: F401 - proves a feature: `make setup` installs verl; without it this fails, never skips
import yaml
from process_marks import marked_processes, new_mark
from training_helpers import REPO, TP, read_metrics

pytestmark = [pytest.mark.integration, pytest.mark.slow]


PROBS_DIFF = "training/rollout_probs_diff_max"


def rl_config(tmp: Path, model: Path, algorithm: dict, *, steps: int, save_steps: int, batch: int = 16) -> Path:
    """A tiny RL job: `batch` rollouts a step (16: 4 prompts x 4); a length penalty beside the answer reward makes
    rewards vary."""
    raw = {
        "engine": "verl",
        "model": {"path": str(model), "dtype": "fp32"},
        "data": {"train_file": "demo/data/rl.jsonl", "max_length": 64},
        "algorithm": {"max_completion_length": 6, "temperature": 1.0, **algorithm},
        "rewards": [
            {"name": "math_answer", "weight": 1.0},
            {"name": "length_penalty", "weight": 0.5, "params": {"max_length": 3, "buffer": 1, "unit": "tokens"}},
        ],
        "training": {
            "learning_rate": 5.0e-5,
            "max_steps": steps,
            "per_device_batch_size": batch,
            "logging_steps": 1,
            "save_steps": save_steps,
            "seed": 0,
        },
        "resources": {"device": "cpu"},
    }
    if algorithm["name"] == "ppo":  # reward functions and a critic started from the policy (verl's GAE)
        raw["algorithm"]["response_length"] = raw["algorithm"].pop("max_completion_length")
        raw["algorithm"]["num_ppo_epochs"] = 1
    path = tmp / f"{algorithm['name']}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def rows(run: Path) -> list[dict]:
    return [r for r in read_metrics(run) if "loss" in r or "grad_norm" in r]


def assert_trained(run: Path, steps: int, *, critic: bool = False) -> list[dict]:
    records = rows(run)
    assert [r["step"] for r in records] == list(range(1, steps + 1)), "each step once"
    for r in records:
        for key in ("loss", "reward", "grad_norm", "entropy", "completions/mean_length", PROBS_DIFF):
            assert key in r, (key, sorted(r))
        assert r[PROBS_DIFF] < 1e-5, "the rollout generated with the actor's current weights"
        assert "rewards/math_answer/mean" in r and "rewards/length_penalty/mean" in r
        if critic:
            assert "value_loss" in r
    assert any(r["grad_norm"] > 0 for r in records), "some step had varied rewards and moved the weights"
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "succeeded" and info.get("rollout") == "hf" and info.get("device") == "cpu"
    return records


def test_grpo_trains_through_verls_trainer_with_the_hf_rollout(tp, tmp_path, sft_start):
    import torch
    from transformers import AutoModelForCausalLM

    run = tmp_path / "grpo"
    config = rl_config(
        tmp_path, sft_start, {"name": "grpo", "num_generations": 4, "loss_type": "dapo"}, steps=3, save_steps=3
    )
    tp("train", config, "--output", run, check=0, timeout=900)
    assert_trained(run, 3)
    assert (run / "checkpoints" / "step_000003").is_dir()
    model = AutoModelForCausalLM.from_pretrained(run / "final")
    assert model.dtype == torch.float32, "final/ in the job's dtype"
    before = AutoModelForCausalLM.from_pretrained(sft_start).state_dict()
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items()), "the weights moved"
    tp("verify", run, check=0)
    kept = [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]
    assert kept and {"math_answer", "length_penalty"} <= set(kept[0]["rewards"]), kept[0]


@pytest.mark.parametrize(
    "algorithm",
    [
        {"name": "grpo", "num_generations": 4, "loss_type": "grpo"},
        {"name": "grpo", "num_generations": 4, "loss_type": "dr_grpo", "scale_rewards": "none"},
        {"name": "grpo", "num_generations": 4, "importance_sampling_level": "sequence"},  # GSPO
        {"name": "rloo", "num_generations": 4, "beta": 0.05},  # KL in the reward: a reference model
        {"name": "reinforce_pp", "num_generations": 4, "beta": 0.001},
        {"name": "reinforce_pp", "num_generations": 4, "baseline": True},
        {"name": "ppo"},  # GAE with a critic
    ],
    ids=["grpo", "dr_grpo", "gspo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "ppo"],
)
def test_each_rl_algorithm_trains_under_verl(tp, tmp_path, sft_start, algorithm):
    run = tmp_path / "run"
    # 3 steps of 8 prompts: a step costs ~1-2 s beside verl's ~60 s start. The SFT start often answers a prompt the
    # same way 4 times (no advantage in that group): 4 prompts x 2 steps once gave no gradient at all (GSPO).
    config = rl_config(tmp_path, sft_start, algorithm, steps=3, save_steps=3, batch=32)
    tp("train", config, "--output", run, check=0, timeout=900)
    records = assert_trained(run, 3, critic=algorithm["name"] == "ppo")
    if algorithm.get("beta"):
        assert any("kl" in r or "actor/reward_kl_penalty" in r for r in records), sorted(records[0])
    assert (run / "final" / "config.json").is_file()


def test_sigterm_mid_run_stops_everything_and_resume_logs_each_step_once(tp, tp_env, tmp_path, sft_start):
    run = tmp_path / "run"
    config = rl_config(tmp_path, sft_start, {"name": "grpo", "num_generations": 4}, steps=5, save_steps=1)
    mark = new_mark()  # in every process of this run, Ray's included
    proc = subprocess.Popen(
        [*TP, "train", str(config), "--output", str(run)],
        env={**tp_env, **mark},
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 600
        while time.time() < deadline and proc.poll() is None:
            if (run / "checkpoints" / "step_000002").is_dir():
                break
            time.sleep(0.5)
        assert proc.poll() is None, proc.communicate()
        stop_sent = time.time()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert time.time() - stop_sent < 30, "the driver and its actors stop within 30 s"
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "stopped", info
    time.sleep(2)
    left = marked_processes(mark)
    assert not left, [p.cmdline()[:3] for p in left]

    tp("train", config, "--resume", run, check=0, timeout=900)
    steps = [r["step"] for r in rows(run)]
    assert steps == [1, 2, 3, 4, 5], "every step once: none lost, none twice"
    assert json.loads((run / "run.json").read_text())["status"] == "succeeded"

"""Real training through the real CLI on the tiny demo model: every algorithm, resume, verify, stop, failure, LoRA."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import tarfile
import time

import pytest
from training_helpers import EXAMPLES, REPO, TP, read_metrics, train_records

pytestmark = pytest.mark.integration

FAST = ["--set", "training.max_steps=3", "--set", "training.save_steps=2", "--set", "training.logging_steps=1"]

# A metric each algorithm's own trainer logs: proof that the right TRL trainer ran.
ALGORITHM_METRIC = {
    "sft": "mean_token_accuracy",
    "dpo": "rewards/margins",
    "kto": "kl",
    "orpo": "log_odds_ratio",
    "simpo": "rewards/margins",
    "grpo": "rewards/math_answer/mean",
    "rloo": "rewards/math_answer/mean",
    "ppo": "objective/kl",
    "reward": "accuracy",
}


@pytest.mark.parametrize("algorithm", sorted(ALGORITHM_METRIC))
def test_every_algorithm_trains(tp, tmp_path, algorithm):
    run = tmp_path / "run"
    proc = tp("train", EXAMPLES / f"{algorithm}_tiny.yaml", "--output", run, *FAST, check=0)
    assert proc.stdout.strip().splitlines()[-1] == str(run)

    records = train_records(run)
    assert [r["step"] for r in records] == [1, 2, 3]
    for r in records:
        assert math.isfinite(r["loss"]), r
        for key in ("epoch", "ts", "lr", "sec_per_step", "mem_used_mb"):
            assert key in r, (key, r)
    assert any(ALGORITHM_METRIC[algorithm] in r for r in records), records[-1].keys()

    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "succeeded" and info["step"] == 3
    assert (run / "checkpoints" / "latest").resolve().name == "step_000003"
    assert (run / "final" / "config.json").is_file()
    assert (run / "config_effective.yaml").is_file() and (run / "env.json").is_file()
    kinds = {json.loads(line)["kind"] for line in (run / "manifest.jsonl").read_text().splitlines()}
    assert {"config", "dataset", "checkpoint", "final"} <= kinds
    tp("verify", run, check=0)


def test_final_model_is_a_trained_hf_model(tp, tmp_path, data_dir):
    """The weights really change and the final directory loads with plain transformers."""
    import torch
    from transformers import AutoModelForCausalLM

    run = tmp_path / "run"
    tp("train", EXAMPLES / "sft_tiny.yaml", "--output", run, *FAST, check=0)
    base = AutoModelForCausalLM.from_pretrained(data_dir / "demo" / "model")
    trained = AutoModelForCausalLM.from_pretrained(run / "final")
    diffs = [(a - b).abs().max().item() for a, b in zip(base.parameters(), trained.parameters(), strict=True)]
    assert max(diffs) > 1e-4
    assert all(torch.isfinite(p).all() for p in trained.parameters())


def test_resume_reproduces_the_uninterrupted_run(tp, tmp_path):
    args = [
        "--set",
        "training.max_steps=8",
        "--set",
        "training.logging_steps=1",
        "--set",
        "training.save_steps=100",
        "--set",
        "training.eval_steps=null",
        "--set",
        "data.eval_file=null",
    ]
    config = EXAMPLES / "sft_tiny.yaml"
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    tp("train", config, "--output", straight, *args, check=0)

    proc = tp("train", config, "--output", interrupted, *args, "--stop-at-step", "4", check=0)
    assert "--resume" in proc.stderr
    info = json.loads((interrupted / "run.json").read_text())
    assert info["status"] == "stopped" and info["step"] == 4
    assert (interrupted / "checkpoints" / "latest").resolve().name == "step_000004"
    assert not (interrupted / "final").exists()

    tp("train", config, "--resume", interrupted, *args, check=0)
    a = [(r["step"], r["loss"]) for r in train_records(straight)]
    b = [(r["step"], r["loss"]) for r in train_records(interrupted)]
    assert [s for s, _ in b] == list(range(1, 9)), "no step is logged twice or lost"
    assert [loss for _, loss in b] == pytest.approx([loss for _, loss in a], rel=1e-6, abs=1e-7)
    info = json.loads((interrupted / "run.json").read_text())
    assert info["status"] == "succeeded" and info["attempts"] == 2
    tp("verify", interrupted, check=0)


def test_a_stop_at_the_last_step_completes_the_run(tp, tmp_path):
    """A stop that arrives with the last step (a worker dying just then) leaves nothing to resume: the run succeeds
    with its final model. (Resuming a checkpoint of the last step would make the trainer take one step more.)"""
    run = tmp_path / "run"
    proc = tp("train", EXAMPLES / "sft_tiny.yaml", "--output", run, *FAST, "--stop-at-step", "3", check=0)
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "succeeded" and info["step"] == 3, info
    assert (run / "final" / "config.json").is_file() and "--resume" not in proc.stderr
    tp("verify", run, check=0)


def test_resume_refuses_a_changed_config(tp, tmp_path):
    run = tmp_path / "run"
    tp("train", EXAMPLES / "sft_tiny.yaml", "--output", run, *FAST, "--stop-at-step", "2", check=0)
    proc = tp(
        "train", EXAMPLES / "sft_tiny.yaml", "--resume", run, *FAST, "--set", "training.learning_rate=0.1", check=2
    )
    assert "training.learning_rate: differs from the run being resumed" in proc.stderr


def test_verify_detects_a_flipped_byte(tp, tmp_path):
    run = tmp_path / "run"
    tp("train", EXAMPLES / "sft_tiny.yaml", "--output", run, *FAST, check=0)
    weights = run / "final" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0x01
    weights.write_bytes(bytes(data))
    proc = tp("verify", run, check=1)
    assert "final/model.safetensors: sha256 mismatch" in proc.stderr


def test_invalid_config_starts_nothing(tp, tmp_path):
    run = tmp_path / "run"
    proc = tp("train", EXAMPLES / "grpo_tiny.yaml", "--output", run, "--set", "algorithm.num_generations=1", check=2)
    assert "algorithm.num_generations: must be >= 2, got 1" in proc.stderr
    assert not run.exists()


def test_failure_writes_error_json_and_failpack_without_secrets(tp, tmp_path, data_dir):
    """A model whose weights are corrupt passes preflight (its config loads) and fails while loading."""
    import shutil

    broken = tmp_path / "broken_model"
    shutil.copytree(data_dir / "demo" / "model", broken)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    secret = "sekrit-token-value-123456"
    run = tmp_path / "run"
    proc = tp(
        "train",
        EXAMPLES / "sft_tiny.yaml",
        "--output",
        run,
        *FAST,
        "--set",
        f"model.path={broken}",
        "--set",
        f"tracking.run_name={secret}",
        env_extra={"WANDB_API_KEY": secret},
        check=1,
    )
    assert proc.stderr.count("FATAL: ") == 1
    error = json.loads((run / "error.json").read_text())
    assert error["traceback"] and error["type"] and error["log_tail"]
    assert json.loads((run / "run.json").read_text())["status"] == "failed"
    with tarfile.open(run / "failpack.tgz") as tar:
        names = {m.name.split("/", 1)[1] for m in tar.getmembers()}
        assert {"error.json", "train.log", "config_effective.yaml", "env.json"} <= names
        blob = b"".join(tar.extractfile(m).read() for m in tar.getmembers())
    assert secret.encode() not in blob
    assert b"<redacted:WANDB_API_KEY>" in blob


@pytest.mark.parametrize("how", ["stop_file", "sigterm"])
def test_stop_saves_a_checkpoint_and_can_resume(tp_env, tmp_path, how):
    run = tmp_path / "run"
    cmd = [
        *TP,
        "train",
        str(EXAMPLES / "sft_tiny.yaml"),
        "--output",
        str(run),
        "--set",
        "training.max_steps=100000",
        "--set",
        "training.logging_steps=1",
        "--set",
        "training.save_steps=100000",
        "--set",
        "training.eval_steps=null",
    ]
    proc = subprocess.Popen(cmd, env=tp_env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (run / "metrics.jsonl").exists():
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        if how == "stop_file":
            (run / "STOP").touch()
        else:
            proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "stopped"
    latest = (run / "checkpoints" / "latest").resolve()
    assert latest.name == f"step_{info['step']:06d}"
    assert (latest / "optimizer.pt").is_file() and (latest / "trainer_state.json").is_file()
    assert read_metrics(run)[-1]["step"] <= info["step"]


def test_lora_train_merge_and_reload(tp, tmp_path, data_dir):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    run = tmp_path / "run"
    tp("train", EXAMPLES / "sft_lora_tiny.yaml", "--output", run, *FAST, check=0)
    assert (run / "final_adapter" / "adapter_config.json").is_file()
    merged = AutoModelForCausalLM.from_pretrained(run / "final").eval()
    base = AutoModelForCausalLM.from_pretrained(data_dir / "demo" / "model")
    with_adapter = PeftModel.from_pretrained(base, run / "final_adapter").eval()
    ids = torch.tensor([[1, 40, 41, 42, 43, 2]])
    with torch.no_grad():
        a = merged(ids).logits
        b = with_adapter(ids).logits
        c = AutoModelForCausalLM.from_pretrained(data_dir / "demo" / "model")(ids).logits
    assert torch.allclose(a, b, atol=1e-4), "merged model == base + adapter"
    assert not torch.allclose(a, c, atol=1e-4), "the adapter changed the model"
    tp("verify", run, check=0)


@pytest.mark.parametrize(
    "config, overrides, metric",
    [
        pytest.param(
            "grpo",
            [
                "algorithm.loss_type=dr_grpo",
                "algorithm.importance_sampling_level=sequence",
                "algorithm.scale_rewards=none",
            ],
            "rewards/math_answer/mean",
            id="gspo-dr_grpo",
        ),
        pytest.param("grpo", ["algorithm.loss_type=grpo", "algorithm.beta=0.04"], "kl", id="grpo-with-kl"),
        pytest.param("dpo", ["algorithm.loss_type=[ipo]"], "rewards/margins", id="dpo-ipo"),
        pytest.param(
            "sft",
            [
                "data.train_file=demo/data/sft_prompt_completion.jsonl",
                "data.eval_file=null",
                "training.eval_steps=null",
                "algorithm.assistant_only_loss=false",
            ],
            "mean_token_accuracy",
            id="sft-prompt-completion",
        ),
        pytest.param(
            "sft",
            [
                "data.train_file=demo/data/sft_alpaca.jsonl",
                "data.eval_file=null",
                "training.eval_steps=null",
                "algorithm.packing=true",
            ],
            "mean_token_accuracy",
            id="sft-alpaca-packing",
        ),
    ],
)
def test_algorithm_variants_train(tp, tmp_path, config, overrides, metric):
    run = tmp_path / "run"
    sets = [arg for o in overrides for arg in ("--set", o)]
    tp("train", EXAMPLES / f"{config}_tiny.yaml", "--output", run, *FAST, *sets, check=0)
    records = train_records(run)
    assert len(records) == 3 and all(math.isfinite(r["loss"]) for r in records)
    assert any(metric in r for r in records), records[-1].keys()

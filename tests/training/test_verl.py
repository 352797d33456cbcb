"""engine: verl trains SFT on CPU through the same runner as every engine: verl's SFT trainer (FSDP2, gloo, fp32)
stepped by our loop. One process, exact resume, and 2 torchrun ranks with the same losses as one process."""

from __future__ import annotations

import json

import pytest
from training_helpers import EXAMPLES, train_records

pytestmark = [pytest.mark.integration, pytest.mark.slow]

pytest.importorskip("verl")

VERL = [
    "--set",
    "engine=verl",
    "--set",
    "model.dtype=fp32",
    "--set",
    "resources.device=cpu",
    "--set",
    "training.max_steps=6",
    "--set",
    "training.save_steps=3",
    "--set",
    "training.logging_steps=1",
    "--set",
    "training.learning_rate=0.001",
    "--set",
    "training.eval_steps=3",
    "--set",
    "training.warmup_ratio=0",
]


def losses(run) -> list[tuple[int, float]]:
    return [(r["step"], r["loss"]) for r in train_records(run)]


@pytest.fixture(scope="module")
def one_process(tp_env, tmp_path_factory):
    import subprocess

    from training_helpers import REPO, TP

    run = tmp_path_factory.mktemp("verl") / "one"
    subprocess.run(
        [
            *TP,
            "train",
            str(EXAMPLES / "sft_tiny.yaml"),
            "--output",
            str(run),
            *VERL,
            "--set",
            "training.per_device_batch_size=8",
        ],
        env=tp_env,
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=600,
    )
    return run


def test_verl_sft_trains_and_leaves_the_same_run_directory(tp, one_process):
    import torch
    from transformers import AutoModelForCausalLM

    run = one_process
    steps = losses(run)
    assert [s for s, _ in steps] == [1, 2, 3, 4, 5, 6], "each step logged once"
    from training_helpers import read_metrics

    evals = [(r["step"], r["eval_loss"]) for r in read_metrics(run) if "eval_loss" in r]
    assert [s for s, _ in evals] == [3, 6] and evals[1][1] < evals[0][1], "verl's validation loss, falling"
    assert steps[-1][1] < steps[0][1], "the loss goes down"
    info = json.loads((run / "run.json").read_text())
    assert (info["status"], info["engine"], info["device"]) == ("succeeded", "verl", "cpu")
    assert sorted(p.name for p in (run / "checkpoints").glob("step_*")) == ["step_000003", "step_000006"]
    assert (run / "checkpoints" / "step_000006" / "global_step_6").is_dir(), "verl's global_step_N inside"
    assert "adv_estimator" not in (run / "verl_config.yaml").read_text()  # the SFT trainer's config
    assert (run / "verl" / "train.parquet").is_file()
    model = AutoModelForCausalLM.from_pretrained(run / "final")
    assert next(model.parameters()).dtype == torch.float32, "final/ in the job's dtype"
    tp("verify", run, check=0)


def test_verl_sft_resumes_exactly(tp, tmp_path, one_process):
    run = tmp_path / "resumed"
    tp(
        "train",
        EXAMPLES / "sft_tiny.yaml",
        "--output",
        run,
        *VERL,
        "--set",
        "training.per_device_batch_size=8",
        "--stop-at-step",
        "3",
        check=0,
    )
    assert [s for s, _ in losses(run)] == [1, 2, 3]
    tp(
        "train",
        EXAMPLES / "sft_tiny.yaml",
        "--resume",
        run,
        *VERL,
        "--set",
        "training.per_device_batch_size=8",
        check=0,
    )
    assert losses(run) == losses(one_process), "no step lost or repeated; the same losses as uninterrupted"


def test_two_torchrun_ranks_match_one_process(tp, tmp_path, one_process):
    run = tmp_path / "two"
    tp(
        "train",
        EXAMPLES / "sft_tiny.yaml",
        "--output",
        run,
        *VERL,
        "--set",
        "training.per_device_batch_size=4",
        "--set",
        "resources.num_devices=2",
        check=0,
    )
    one, two = losses(one_process), losses(run)
    assert [s for s, _ in two] == [s for s, _ in one]
    assert [loss for _, loss in two] == pytest.approx([loss for _, loss in one], rel=1e-5)
    from training_helpers import read_metrics

    evals = [r["step"] for r in read_metrics(run) if "eval_loss" in r]
    assert evals == [3, 6], "validation every eval_steps, averaged over the ranks"
    info = json.loads((run / "run.json").read_text())
    assert (info["launcher"], info["world_size"]) == ("torchrun", 2)


def test_max_steps_beyond_one_epoch_keeps_going_like_trl(tp, tmp_path):
    """The demo set has 375 rows: at 200 rows per step an epoch is one step (the last partial batch is dropped, as
    with several ranks); max_steps 4 runs 4 epochs instead of stopping after the configured one."""
    run = tmp_path / "epochs"
    tp(
        "train",
        EXAMPLES / "sft_tiny.yaml",
        "--output",
        run,
        *VERL,
        "--set",
        "training.max_steps=4",
        "--set",
        "training.per_device_batch_size=200",
        "--set",
        "training.save_steps=100",
        check=0,
    )
    records = train_records(run)
    assert [(r["step"], r["epoch"]) for r in records] == [(1, 1), (2, 2), (3, 3), (4, 4)]


def test_verls_model_merger_makes_final_in_the_jobs_dtype(tmp_path, one_process):
    """RL's final/: verl's model merger over FSDP shards (an SFT checkpoint has the actor's layout), written by the
    merger in bf16 and cast back to the job's dtype; the values are the trained weights rounded to bf16."""
    import torch
    from transformers import AutoModelForCausalLM

    from training_platform.training.engines.verl.rl import merge_final

    shards = one_process / "checkpoints" / "step_000006" / "global_step_6"
    written = merge_final(shards, tmp_path / "final", dtype="fp32")
    assert written == "float32"
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "final")
    trained = AutoModelForCausalLM.from_pretrained(one_process / "final")  # gathered in fp32 by our SFT loop
    assert next(merged.parameters()).dtype == torch.float32
    a, b = merged.state_dict(), trained.state_dict()
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name].to(torch.bfloat16).to(torch.float32)), name
    assert (tmp_path / "final" / "tokenizer.json").is_file()
    assert merge_final(shards, tmp_path / "bf16", dtype="bf16") == "bfloat16"
    assert not list(tmp_path.glob(".*")), "no staging directory left behind"

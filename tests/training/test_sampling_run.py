"""A real short SFT run with data.sampling curriculum: the sampler feeds the trainer and sampling.json is recorded."""

from __future__ import annotations

import json
import random

import pytest
import yaml

pytestmark = pytest.mark.integration


def test_sft_curriculum_run_writes_sampling_json(tp, tmp_path):
    rng = random.Random(0)
    rows = []
    for i in range(96):
        operands = [rng.randint(0, 9) for _ in range(2 + i % 4)]
        rows.append(
            {
                "messages": [
                    {"role": "user", "content": " + ".join(map(str, operands)) + " ="},
                    {"role": "assistant", "content": str(sum(operands))},
                ]
            }
        )
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = {
        "model": {"path": "demo/model"},
        "data": {
            "train_file": str(train),
            "max_length": 48,
            "sampling": {
                "strategy": "curriculum",
                "seed": 5,
                "schedule": [
                    {"until_step": 2, "mix": {"easy": 1.0}},
                    {"until_step": 4, "mix": {"easy": 0.25, "medium": 0.25, "hard": 0.5}},
                ],
            },
        },
        "algorithm": {"name": "sft", "assistant_only_loss": True},
        "training": {"max_steps": 4, "per_device_batch_size": 4, "logging_steps": 1, "save_steps": 4},
        "resources": {"device": "cpu"},
    }
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(config))
    run = tmp_path / "run"
    tp("train", path, "--output", run, check=0)

    record = json.loads((run / "sampling.json").read_text())
    assert record["strategy"] == "curriculum" and record["sampler"] == "DifficultySampler" and record["seed"] == 5
    assert sum(record["bucket_rows"].values()) == 96 and min(record["bucket_rows"].values()) > 0
    assert record["per_step"][:2] == [{"easy": 4, "medium": 0, "hard": 0}] * 2
    assert record["stages"][1]["drawn"] == {"easy": 2, "medium": 2, "hard": 4}
    manifest = [json.loads(line) for line in (run / "manifest.jsonl").read_text().splitlines()]
    assert any(m["kind"] == "sampling" and m["path"] == "sampling.json" for m in manifest)
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "succeeded" and info["sampling"]["strategy"] == "curriculum"
    assert "data.sampling curriculum" in (run / "train.log").read_text()

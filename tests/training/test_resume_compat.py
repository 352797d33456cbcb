"""Resuming a run recorded by an older version: fields added to the schema since then count as their defaults."""

from __future__ import annotations

import pytest

from training_platform.training.config import effective_config, parse_config
from training_platform.training.runner import _resume_differences

pytestmark = pytest.mark.unit

RAW = {
    "model": {"path": "demo/model"},
    "data": {"train_file": "demo/data/sft.jsonl"},
    "algorithm": {"name": "sft"},
    "training": {"max_steps": 5},
}


def test_a_field_added_since_the_run_started_is_not_a_difference():
    now = effective_config(parse_config(RAW))
    recorded = effective_config(parse_config(RAW))
    del recorded["training"]["rollout_samples_per_step"]  # written before the field existed
    assert _resume_differences(recorded, now) == []


def test_a_real_change_is_still_refused_naming_the_field():
    now = effective_config(parse_config({**RAW, "training": {"max_steps": 5, "learning_rate": 0.1}}))
    recorded = effective_config(parse_config(RAW))
    del recorded["training"]["rollout_samples_per_step"]
    assert [e.path for e in _resume_differences(recorded, now)] == ["training.learning_rate"]
    changed = effective_config(parse_config({**RAW, "training": {"max_steps": 5, "rollout_samples_per_step": 2}}))
    assert [e.path for e in _resume_differences(recorded, changed)] == ["training.rollout_samples_per_step"]

"""Fixtures of the training tests that run real processes: a private TP_DATA_DIR with the demo assets, and a helper
that runs the real `tp` CLI."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from training_helpers import REPO, TP  # noqa: F401 - re-exported for the tests


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> Path:
    from training_platform.demo import prepare_demo

    root = tmp_path_factory.mktemp("tp_data")
    prepare_demo(root)
    return root


@pytest.fixture(scope="session")
def tp_env(data_dir) -> dict[str, str]:
    env = dict(os.environ)
    env.update(TP_DATA_DIR=str(data_dir), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return env


@pytest.fixture
def tp(tp_env):
    """Run `tp ARGS...` as a real process; returns the CompletedProcess (text)."""

    def run(*args: str, env_extra: dict | None = None, timeout: int = 600, check: int | None = None):
        env = {**tp_env, **(env_extra or {})}
        proc = subprocess.run(
            [*TP, *map(str, args)], env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO
        )
        if check is not None:
            assert proc.returncode == check, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        return proc

    return run


@pytest.fixture(scope="session")
def sft_start(tp_env, tmp_path_factory) -> Path:
    """150 steps of sft_tiny (TRL): a model whose answers vary, so RL rewards vary (an untrained model scores 0)."""
    from training_helpers import EXAMPLES

    run = tmp_path_factory.mktemp("sft_start") / "run"
    subprocess.run(
        [*TP, "train", str(EXAMPLES / "sft_tiny.yaml"), "--output", str(run), "--set", "training.max_steps=150"],
        env=tp_env,
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=900,
    )
    return run / "final"

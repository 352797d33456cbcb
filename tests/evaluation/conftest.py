"""Evaluation test fixtures: the demo assets (tiny Qwen2 model + arithmetic data in GSM8K format)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def demo(tmp_path_factory) -> dict[str, Path]:
    """The demo data and tiny model (as `prepare_demo` builds them, minus the reward model), once per session."""
    from training_platform.demo import create_tiny_model, synth_arithmetic
    from training_platform.demo.arithmetic import dataset_texts

    root = tmp_path_factory.mktemp("tp_data") / "demo"
    synth_arithmetic(root / "data")
    create_tiny_model(root / "model", extra_corpus=list(dataset_texts(root / "data")))
    return {"data": root / "data", "model": root / "model"}


@pytest.fixture(scope="session")
def tiny_backend(demo):
    """The tiny demo model behind the transformers backend (loaded once)."""
    from training_platform.evaluation.generation import TransformersBackend

    backend = TransformersBackend(str(demo["model"]), batch_size=4, num_threads=1)  # 1 thread: fastest here
    yield backend
    backend.close()


@pytest.fixture(scope="session")
def sandbox_ok():
    """Tests that execute generated code need working bubblewrap isolation (the sandbox fails closed without it).

    Without it they fail with instructions; TP_SKIP_SANDBOX_TESTS=1 skips them instead."""
    from training_platform.evaluation.sandbox import detect_isolation

    info = detect_isolation()
    if not info.available:
        if os.environ.get("TP_SKIP_SANDBOX_TESTS") == "1":
            pytest.skip(f"sandbox isolation unavailable: {info.reason}")
        pytest.fail(
            f"sandbox isolation unavailable: {info.reason} -- install bubblewrap (apt-get install -y "
            f"bubblewrap) or set TP_SKIP_SANDBOX_TESTS=1"
        )
    return info

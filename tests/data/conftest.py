"""Data factory test fixtures: the demo assets (tiny model + tokenizer, arithmetic data) and a `tp data` runner."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def demo(tmp_path_factory) -> dict[str, Path]:
    """prepare_demo into a private data dir (~3 s, once per session)."""
    from training_platform.demo import prepare_demo

    return prepare_demo(tmp_path_factory.mktemp("tp_data"))


@pytest.fixture
def cli():
    """Run `tp data ARGS...` in-process on a fresh Typer app with the data commands registered."""
    from data_helpers import run_data_cli

    return run_data_cli

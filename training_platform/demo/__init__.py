"""Offline demo assets: a tiny Qwen2-style model, a reward model built from it, and synthetic addition data.

Module imports stay light (the CLI imports this package); torch / transformers load only when building.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from training_platform.demo.arithmetic import DATA_FILES, dataset_texts, synth_arithmetic
from training_platform.demo.tiny_model import CHAT_TEMPLATE, create_tiny_model, create_tiny_reward_model

__all__ = ["prepare_demo", "create_tiny_model", "create_tiny_reward_model", "synth_arithmetic"]

_MODEL_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


def _data_complete(d: Path) -> bool:
    return all((d / name).is_file() for name in DATA_FILES.values())


def _model_complete(d: Path) -> bool:
    return all((d / name).is_file() for name in _MODEL_FILES)


def _refresh_chat_template(d: Path) -> None:
    """A demo model built before the template learnt tools gets the current one (rendered byte-identically without
    tools, so its runs and checkpoints are unaffected); the weights and the vocabulary are left as they are."""
    import json

    from training_platform.core.files import atomic_write_text

    jinja = d / "chat_template.jinja"
    if jinja.is_file():
        if jinja.read_text(encoding="utf-8") != CHAT_TEMPLATE:
            atomic_write_text(jinja, CHAT_TEMPLATE)
        return
    config_path = d / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    if config.get("chat_template") not in (None, CHAT_TEMPLATE):
        config["chat_template"] = CHAT_TEMPLATE
        atomic_write_text(config_path, json.dumps(config, indent=2, ensure_ascii=False) + "\n")


def _build_atomically(target: Path, build: Callable[[Path], object]) -> None:
    """Build into a sibling temp dir, then swap it in, so a crash never leaves a half-written asset dir."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"))
    try:
        build(staging)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def prepare_demo(data_dir: str | Path, *, force: bool = False) -> dict[str, Path]:
    """Build `<data_dir>/demo/{data,model,reward_model}`; existing complete parts are kept unless `force` (a kept
    model's chat template is brought up to date)."""
    root = Path(data_dir).expanduser() / "demo"
    paths = {"model": root / "model", "reward_model": root / "reward_model", "data": root / "data"}

    # An incomplete dir (e.g. from an older interrupted build) is rebuilt too.
    rebuild_data = force or not _data_complete(paths["data"])
    rebuild_model = force or not _model_complete(paths["model"])
    rebuild_reward = force or rebuild_model or not _model_complete(paths["reward_model"])

    if rebuild_data:
        _build_atomically(paths["data"], synth_arithmetic)
    if rebuild_model:
        corpus = list(dataset_texts(paths["data"]))
        _build_atomically(paths["model"], lambda d: create_tiny_model(d, extra_corpus=corpus))
    if rebuild_reward:
        _build_atomically(paths["reward_model"], lambda d: create_tiny_reward_model(paths["model"], d))
    for kept in ("model", "reward_model"):
        _refresh_chat_template(paths[kept])
    return paths

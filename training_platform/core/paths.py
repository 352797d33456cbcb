"""Where the platform keeps its files.

`TP_DATA_DIR` (default `./var`) is the root for demo assets, datasets and runs. Relative paths in a job config
resolve against it; absolute paths are used as they are.
"""

from __future__ import annotations

import os
from pathlib import Path


def data_dir() -> Path:
    from training_platform.core.settings import current_settings

    return current_settings().data_path


def resolve_data_path(path: str | os.PathLike[str]) -> Path:
    """Resolve a config path: absolute as is, relative against `TP_DATA_DIR`."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else data_dir() / p


def runs_dir() -> Path:
    return data_dir() / "runs"


def display_path(path: str | os.PathLike[str]) -> str:
    """A path as messages show it: relative to `TP_DATA_DIR` when inside it (never the server's absolute path)."""
    p = Path(path)
    try:
        return str(p.relative_to(data_dir())) or "."
    except ValueError:
        return str(path)


def resolve_model_ref(ref: str) -> tuple[str, bool]:
    """A model reference is a local directory (relative to TP_DATA_DIR) or a hub id. Returns (ref, is_local)."""
    local = resolve_data_path(ref)
    if local.exists():
        return str(local), True
    return ref, False

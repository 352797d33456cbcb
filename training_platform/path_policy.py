"""The path policy shared by the API, the workers and the data/evaluation layers: every path a user names must
resolve (relative paths against TP_DATA_DIR, `..` and symlinks resolved) inside one of `settings.allowed_roots`;
a hub id `org/name` that names nothing local is not a path.
"""

from __future__ import annotations

import re
from pathlib import Path

from training_platform.settings import Settings
from training_platform.training.config import FieldError

HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")


def resolve_path(value: str, settings: Settings) -> Path:
    """Relative -> against TP_DATA_DIR; then `..` and symlinks resolved (the target need not exist)."""
    p = Path(value).expanduser()
    if not p.is_absolute():
        p = settings.data_path / p
    return p.resolve()


def inside_allowed_roots(path: Path, settings: Settings) -> bool:
    return any(path == root or path.is_relative_to(root) for root in settings.allowed_roots)


def check_path(field: str, value: str, settings: Settings) -> FieldError | None:
    if "\x00" in value:
        return FieldError(field, "must not contain NUL bytes")
    try:
        resolved = resolve_path(value, settings)
    except (OSError, RuntimeError) as exc:  # symlink loops
        return FieldError(field, f"cannot resolve {value!r}: {exc}")
    if not inside_allowed_roots(resolved, settings):
        roots = ", ".join(str(r) for r in settings.allowed_roots)
        return FieldError(field, f"{value!r} resolves to {resolved}, outside the allowed directories ({roots})")
    return None


def is_hub_id(value: str, settings: Settings) -> bool:
    """`org/name` that names nothing local: neither the path nor its first component exists under TP_DATA_DIR
    (so `link/x` through a symlink `link` is a local path and gets the policy)."""
    if not HUB_ID.match(value) or ".." in value:
        return False
    org = value.split("/", 1)[0]
    local = settings.data_path / value
    return not (settings.data_path / org).exists() and not (settings.data_path / org).is_symlink() \
        and not local.exists()

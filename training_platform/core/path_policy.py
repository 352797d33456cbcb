"""The path policy shared by the API (at submission) and the workers (again, before opening anything): every path a
user names must resolve (relative paths against TP_DATA_DIR, `..` and symlinks resolved) inside an area its caller
may read. Deny by default. The areas (D = TP_DATA_DIR; each area root is itself resolved, so an operator's symlink
such as `demo -> /srv/demo` is followed):

- D/demo/, D/shared/, TP_MODEL_ROOTS: everyone (the demo assets, files the operator shares, the model roots).
- D/users/<user name>/: that user.
- D/runs/job-N[.attempt-K]/ and D/evals/job-N/ (and whatever run directory the workers recorded for job N): the
  owner of job N.
- D/datasets/<xx>/<sha256>.<ext> (the content store): owners of a dataset with a version of that content, and
  everyone when such a dataset is shared.
- a registered model's directory: its owner; everyone when it is shared or a platform model (no owner: the demo).

Admins may read anything inside the allowed roots (TP_DATA_DIR and TP_MODEL_ROOTS) and the areas. A hub id
`org/name` that names nothing local is not a path. Messages name the field and show paths relative to TP_DATA_DIR,
never the server's absolute paths.

The rules are here and need no database: a `Reader` (the protocol below) answers the ownership questions. The
platform's reader, backed by the database, and the visibility rules of registered models and datasets (so listings
and path areas follow one rule) are in `services/access.py`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel

from training_platform.core.errors import FieldError
from training_platform.core.settings import Settings
from training_platform.core.userpath import PathMarker, path_limit_problem, user_paths

HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
_JOB_DIR = re.compile(r"^job-(\d{1,18})(?:\.attempt-\d{1,9})?$")
_EVAL_DIR = re.compile(r"^job-(\d{1,18})$")
_STORE_FILE = re.compile(r"^([0-9a-f]{64})(?:\.[A-Za-z0-9.]{1,16})?$")
_USER_AREA = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,254}$")
EVERYONE_AREAS = ("demo", "shared")


# ---------------------------------------------------------------------------------------------- the reader


class Reader(Protocol):
    """Who reads, and the ownership questions the areas depend on (services/access.py answers them from the
    database)."""

    @property
    def user_name(self) -> str: ...

    @property
    def is_admin(self) -> bool: ...

    def owns_job(self, job_id: int) -> bool: ...

    def can_read_content(self, sha256: str) -> bool: ...

    def model_dirs(self, settings: Settings) -> list[Path]: ...

    def run_dirs(self, settings: Settings) -> list[Path]: ...


# ---------------------------------------------------------------------------------------------- paths


def resolve_path(value: str, settings: Settings) -> Path:
    """Relative -> against TP_DATA_DIR; then `..` and symlinks resolved (the target need not exist)."""
    p = Path(value).expanduser()
    if not p.is_absolute():
        p = settings.data_path / p
    return p.resolve()


def shown(value: str | Path, settings: Settings) -> str:
    """A path as messages show it: relative to TP_DATA_DIR when inside it, else as the user wrote it."""
    p = Path(value)
    if p.is_absolute():
        try:
            return str(p.relative_to(settings.data_path)) or "."
        except ValueError:
            return str(value)
    return str(value)


def _under(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def _model_roots(settings: Settings) -> list[Path]:
    return list(settings.allowed_roots[1:])


def inside_allowed_roots(path: Path, settings: Settings) -> bool:
    return any(_under(path, root) for root in settings.allowed_roots)


def _area_root(settings: Settings, *parts: str) -> Path:
    return (settings.data_path.joinpath(*parts)).resolve()


def readable(path: Path, reader: Reader, settings: Settings) -> bool:
    """Is the resolved `path` inside an area `reader` may read?"""
    roots = [_area_root(settings, name) for name in EVERYONE_AREAS] + _model_roots(settings)
    if _USER_AREA.match(reader.user_name or ""):  # one plain component (never "..": that would be D itself)
        roots.append(_area_root(settings, "users", reader.user_name))
    if any(_under(path, root) for root in roots):
        return True
    if reader.is_admin:
        return inside_allowed_roots(path, settings)
    for area, pattern in (("runs", _JOB_DIR), ("evals", _EVAL_DIR)):
        root = _area_root(settings, area)
        if path != root and path.is_relative_to(root):
            match = pattern.match(path.relative_to(root).parts[0])
            if match and reader.owns_job(int(match.group(1))):
                return True
    store = _area_root(settings, "datasets")
    if path.is_relative_to(store):
        parts = path.relative_to(store).parts
        if len(parts) == 2:
            match = _STORE_FILE.match(parts[1])
            if match and match.group(1)[:2] == parts[0] and reader.can_read_content(match.group(1)):
                return True
    return any(_under(path, root) for root in reader.model_dirs(settings)) or any(
        _under(path, root) for root in reader.run_dirs(settings)
    )


def check_path(loc: str, value: str, settings: Settings, reader: Reader) -> FieldError | None:
    """None if `reader` may read `value`; else the problem, naming `loc`. The same answer whether or not the
    path exists (so another user's files cannot be probed)."""
    problem = path_limit_problem(value)
    if problem is not None:
        return FieldError(loc, problem)
    try:
        resolved = resolve_path(value, settings)
    except (OSError, RuntimeError) as exc:  # symlink loops, names too long for the file system
        return FieldError(loc, f"cannot resolve {shown(value, settings)!r}: {type(exc).__name__}")
    if readable(resolved, reader, settings):
        return None
    lexical = Path(os.path.normpath(settings.data_path / Path(value).expanduser()))
    name = shown(value, settings)
    if not inside_allowed_roots(lexical, settings):
        where = "the data directory" + (" and TP_MODEL_ROOTS" if _model_roots(settings) else "")
        return FieldError(loc, f"{name!r} is outside the allowed directories ({where})")
    # One message whatever lies behind the name (a symlink out, another user's file, nothing): nothing to probe.
    areas = (
        "anything in the allowed directories"
        if reader.is_admin
        else f"runs/job-N and evals/job-N of your jobs, users/{reader.user_name}/, the files of your datasets and of "
        "shared ones, demo/, shared/, the model roots, registered models you may use"
    )
    return FieldError(loc, f"{name!r} resolves outside the allowed directories or the areas you may read ({areas})")


def is_hub_id(value: str, settings: Settings) -> bool:
    """`org/name` that names nothing local: neither the path nor its first component exists under TP_DATA_DIR
    (so `link/x` through a symlink `link` is a local path and gets the policy)."""
    if not HUB_ID.match(value) or ".." in value:
        return False
    org = value.split("/", 1)[0]
    local = settings.data_path / value
    return (
        not (settings.data_path / org).exists() and not (settings.data_path / org).is_symlink() and not local.exists()
    )


def check_marked(
    paths: Iterable[tuple[str, str, PathMarker]], settings: Settings, reader: Reader, prefix: str = ""
) -> list[FieldError]:
    """The policy over marked fields (see `training_platform.core.userpath`); a `model` field that is a hub id passes
    (registered model names must have been substituted by the caller)."""
    errors = []
    for loc, value, marker in paths:
        if marker.kind == "model" and is_hub_id(value, settings):
            continue
        error = check_path(prefix + loc, value, settings, reader)
        if error is not None:
            errors.append(error)
    return errors


def check_model_paths(model: BaseModel, settings: Settings, reader: Reader, prefix: str = "") -> list[FieldError]:
    """Every marked path field of a validated model."""
    return check_marked(user_paths(model), settings, reader, prefix)

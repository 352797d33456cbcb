"""Checking a job config submitted over HTTP: layers 1-2 of the training config validation plus the path policy.

Layer 3 (files exist, rows valid, the model loads) needs the disk and runs in the worker's preflight gate.

Path policy (`training_platform/path_policy.py`): every field of the validated config marked as a path (typed
`UserFile`, `UserDir`, `ModelRef`, ... from `training_platform/userpath.py`) must resolve inside an area the
submitting user may read; the worker checks the same fields again before it opens anything. `model.path` (a
`ModelRef`) may instead be the name of a registered model the user may use (its path is substituted) or a hub id
`org/name` that is not a local path.
"""

from __future__ import annotations

import copy
from typing import Any

from sqlmodel import Session

from training_platform.core import overrides as core_overrides
from training_platform.core.errors import FieldError
from training_platform.core.path_policy import check_marked, check_path
from training_platform.core.settings import Settings
from training_platform.core.userpath import raw_user_paths
from training_platform.db.models import User
from training_platform.services.access import reader_for, visible_model_by_name
from training_platform.training.config import ConfigError, JobConfig, check_rules, parse_config, training_config_paths


def _set(config: dict, loc: str, value: str) -> None:
    """Set a plain dotted field path (`model.path`) in the raw config."""
    node: Any = config
    *parents, last = loc.split(".")
    for key in parents:
        node = node[key]
    node[last] = value


def check_job_config(session: Session, raw: Any, settings: Settings, user: User) -> dict:
    """Validate a submitted config; returns the config to store (registered model names substituted).
    Raises ConfigError listing every problem found by the schema, the cross-field rules and the path policy."""
    errors: list[FieldError] = []
    config = copy.deepcopy(raw)
    try:
        cfg = parse_config(config)
    except ConfigError as exc:
        cfg = None
        errors.extend(exc.errors)
    if cfg is not None:
        errors.extend(check_rules(cfg))
        errors.extend(_gate_profile_problems(session, cfg, settings))
        paths = training_config_paths(cfg)
    elif isinstance(config, dict):  # the path fields are still checked, so every problem is reported at once
        paths = list(raw_user_paths(JobConfig, config))
    else:
        raise ConfigError(errors)

    reader = reader_for(session, user)
    others = []
    for loc, value, marker in paths:
        if marker.kind == "model" and "[" not in loc:
            registered = visible_model_by_name(session, user, value)
            if registered is not None:
                _set(config, loc, registered.path)
                error = check_path(loc, registered.path, settings, reader)
                if error is not None:
                    errors.append(FieldError(loc, f"registered model {value!r}: {error.reason}"))
                continue
        others.append((loc, value, marker))
    errors.extend(check_marked(others, settings, reader))

    if errors:
        seen: set[tuple[str, str]] = set()
        unique: list[FieldError] = []
        for e in errors:
            if e not in seen:
                seen.add(e)
                unique.append(e)
        raise ConfigError(unique)
    return config


def _gate_profile_problems(session: Session, cfg: JobConfig, settings: Settings) -> list[FieldError]:
    """`data.gate.profile` names a profile that exists now (the worker's preflight resolves it again)."""
    gate = getattr(cfg.data, "gate", None)
    if gate is None:
        return []
    from training_platform.data.gate import GateError
    from training_platform.services import gates as gate_service

    try:
        gate_service.resolve_profile(session, settings, gate.profile, loc="data.gate.profile")
    except GateError as exc:
        return [FieldError(loc, msg) for loc, msg in exc.errors]
    return []


def apply_overrides(config: dict, overrides: dict[str, Any]) -> dict:
    """The API's overrides (clone, sweeps): JSON values by dotted key (core/overrides.py)."""
    return core_overrides.apply_overrides(config, overrides.items())

"""Checking a job config submitted over HTTP: layers 1-2 of the training config validation plus the path policy.

Layer 3 (files exist, rows valid, the model loads) needs the disk and runs in the worker's preflight gate.

Path policy (`training_platform/path_policy.py`): every path a config names must resolve inside one of
`settings.allowed_roots`. `model.path` may instead be the name of a registered model (its path is substituted) or a
hub id `org/name` that is not a local path.
"""

from __future__ import annotations

import copy
from typing import Any

from sqlmodel import Session, select

from training_platform.db.models import RegisteredModel
from training_platform.path_policy import check_path, is_hub_id
from training_platform.settings import Settings
from training_platform.training.config import ConfigError, FieldError, check_rules, parse_config

# (field path, keys into the raw config); model.path is handled separately.
PATH_FIELDS: list[tuple[str, tuple[str, ...]]] = [
    ("data.train_file", ("data", "train_file")),
    ("data.eval_file", ("data", "eval_file")),
    ("algorithm.reward_model_path", ("algorithm", "reward_model_path")),
    ("algorithm.value_model_path", ("algorithm", "value_model_path")),
]


def _get(raw: dict, keys: tuple[str, ...]) -> Any:
    node: Any = raw
    for key in keys:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


def check_job_config(session: Session, raw: Any, settings: Settings) -> dict:
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
    if not isinstance(config, dict):
        raise ConfigError(errors)

    # The path policy looks at the raw values, so it reports even when other fields are invalid.
    model_path = _get(config, ("model", "path"))
    if isinstance(model_path, str) and model_path:
        registered = session.exec(select(RegisteredModel).where(RegisteredModel.name == model_path)).first()
        if registered is not None:
            config["model"]["path"] = registered.path
            error = check_path("model.path", registered.path, settings)
            if error is not None:
                errors.append(FieldError("model.path", f"registered model {model_path!r}: {error.reason}"))
        elif not is_hub_id(model_path, settings):
            error = check_path("model.path", model_path, settings)
            if error is not None:
                errors.append(error)
    for field, keys in PATH_FIELDS:
        value = _get(config, keys)
        if isinstance(value, str) and value:
            error = check_path(field, value, settings)
            if error is not None:
                errors.append(error)

    if errors:
        seen: set[tuple[str, str]] = set()
        unique = [e for e in errors if not (tuple(e) in seen or seen.add(tuple(e)))]
        raise ConfigError(unique)
    return config


MAX_OVERRIDES = 100  # keys per clone request
MAX_OVERRIDE_DEPTH = 16  # dotted parts per key (a config is 4 deep)


class OverrideError(ValueError):
    def __init__(self, key: str, reason: str):
        self.key, self.reason = key, reason
        super().__init__(f"{key}: {reason}")


def apply_overrides(config: dict, overrides: dict[str, Any]) -> dict:
    """`{"training.max_steps": 50, "rewards.0.weight": 0.5}` -> a changed copy. Values are JSON values (a
    mapping value replaces the whole section). Missing intermediate mappings are created; descending into a
    scalar is an error. At most MAX_OVERRIDES keys of at most MAX_OVERRIDE_DEPTH parts (the values' own nesting
    is bounded where the request body is read)."""
    if len(overrides) > MAX_OVERRIDES:
        raise OverrideError("", f"at most {MAX_OVERRIDES} keys, got {len(overrides)}")
    result = copy.deepcopy(config)
    for key, value in overrides.items():
        parts = key.split(".")
        if not key or any(not p for p in parts):
            raise OverrideError(key, "expected a dotted key such as 'training.max_steps'")
        if len(parts) > MAX_OVERRIDE_DEPTH:
            raise OverrideError(key[:100], f"at most {MAX_OVERRIDE_DEPTH} dotted parts, got {len(parts)}")
        node: Any = result
        for depth, part in enumerate(parts):
            last = depth == len(parts) - 1
            where = ".".join(parts[: depth + 1])
            if isinstance(node, list):
                if not part.isdigit() or int(part) >= len(node):
                    raise OverrideError(key, f"no list item {part!r} at {where} (the list has {len(node)} items)")
                if last:
                    node[int(part)] = copy.deepcopy(value)
                else:
                    node = node[int(part)]
                continue
            if not isinstance(node, dict):
                raise OverrideError(key, f"{'.'.join(parts[:depth])} is not a mapping")
            if last:
                node[part] = copy.deepcopy(value)
            else:
                if node.get(part) is None:
                    node[part] = {}
                elif not isinstance(node[part], dict | list):
                    raise OverrideError(key, f"{where} is a {type(node[part]).__name__}, not a mapping or list")
                node = node[part]
    return result

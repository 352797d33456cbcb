"""Compose verl's config for a job, offline: verl's Hydra defaults, then the mapping table, then the user's
`verl.overrides`, then our checks and verl's own `validate_config`. Raises ConfigError naming our fields.

Imports verl (and so torch): called by preflight, `tp train --dry-run` and the engine, never by the API.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from training_platform.core.errors import FieldError
from training_platform.training.config import ConfigError
from training_platform.training.engines.verl import mapping

if TYPE_CHECKING:  # pragma: no cover
    from omegaconf import DictConfig

    from training_platform.training.config import JobConfig

_HYDRA_LOCK = threading.Lock()  # Hydra's global state: one composition at a time


_DEFAULTS: dict[str, DictConfig] = {}


def compose_defaults(name: str) -> DictConfig:
    """verl's config `name` as its Hydra defaults compose it (composed once per process; a copy each call)."""
    import copy

    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    with _HYDRA_LOCK:
        if name not in _DEFAULTS:
            GlobalHydra.instance().clear()
            try:
                with initialize_config_module(config_module="verl.trainer.config", version_base=None):
                    _DEFAULTS[name] = compose(config_name=name)
            finally:
                GlobalHydra.instance().clear()
        return copy.deepcopy(_DEFAULTS[name])


def _set(config: DictConfig, key: str, value: Any) -> None:
    """Set an existing key (struct mode: a key verl does not have is an error, not a silent addition)."""
    from omegaconf import OmegaConf, open_dict

    parent = _parent(config, key)
    leaf = key.rpartition(".")[2]
    if parent is None:
        raise KeyError(key)
    if (
        isinstance(value, dict)
        or value is None
        and not OmegaConf.is_missing(parent, leaf)
        and OmegaConf.is_dict(parent[leaf])
    ):
        with open_dict(parent):
            parent[leaf] = value
    else:
        OmegaConf.update(config, key, value, merge=False)


def _parent(config: DictConfig, key: str) -> DictConfig | None:
    """The section holding `key`, when it has that key (a `???` value counts: it is there, unset)."""
    from omegaconf import OmegaConf

    parent_key, _, leaf = key.rpartition(".")
    parent = OmegaConf.select(config, parent_key) if parent_key else config
    if parent is None or not OmegaConf.is_dict(parent) or leaf not in list(parent.keys()):
        return None
    return parent


def generate(cfg: JobConfig, paths: mapping.VerlPaths, *, check: bool = True) -> DictConfig:
    """The verl config of `cfg`: defaults + mapping + overrides, checked (ConfigError lists every problem)."""
    from omegaconf import ListConfig, OmegaConf

    config = compose_defaults(mapping.config_name(cfg))
    for key, value in mapping.assignments(cfg, paths).items():
        if key in mapping.ADDED_KEYS:
            from omegaconf import open_dict

            parent_key, _, leaf = key.rpartition(".")
            with open_dict(config):
                OmegaConf.select(config, parent_key)[leaf] = value
            continue
        try:
            _set(config, key, value)
        except KeyError:  # the table names a key this verl version does not have: our bug, said loudly
            raise RuntimeError(f"verl {verl_version()} has no config key {key!r} (engines/verl/mapping.py)") from None
    errors: list[FieldError] = []
    for key, value in cfg.verl.overrides.items():
        field = f"verl.overrides.{key}"
        parent = _parent(config, key)
        if parent is None:
            errors.append(FieldError(field, f"verl's {mapping.config_name(cfg)} config has no key {key!r}"))
            continue
        leaf = key.rpartition(".")[2]
        node = None if OmegaConf.is_missing(parent, leaf) else parent._get_node(leaf)
        if OmegaConf.is_dict(node):
            errors.append(FieldError(field, "is a section of verl's config: set its keys one by one"))
            continue
        current = list(node) if isinstance(node, ListConfig) else None if node is None else node._value()
        problem = _type_problem(current, value)
        if problem:
            errors.append(FieldError(field, problem))
            continue
        _set(config, key, value)
    if errors:
        raise ConfigError(errors)
    if check:
        from training_platform.training.engines.verl.checks import check_config

        errors = check_config(cfg, config)
        if errors:
            raise ConfigError(errors)
    return config


def _type_problem(current: Any, value: Any) -> str | None:
    """An override must keep the type of verl's default (a string gamma is an error, an int learning rate is fine)."""
    if isinstance(current, list):
        return None if isinstance(value, list) else f"must be a list like verl's default ({current}), got {value!r}"
    if current is None or value is None:
        return None
    if isinstance(current, bool):
        return None if isinstance(value, bool) else f"must be a boolean like verl's default ({current}), got {value!r}"
    if isinstance(current, int | float):
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"must be a number like verl's default ({current}), got {value!r}"
        return None
    if isinstance(current, str) and not isinstance(value, str):
        return f"must be a string like verl's default ({current!r}), got {value!r}"
    return None


def to_yaml(config: DictConfig) -> str:
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(config, resolve=False)


def verl_version() -> str:
    try:
        from importlib.metadata import version

        return version("verl")
    except Exception:  # noqa: BLE001
        return "?"

"""Dotted-key overrides of a config, the one implementation behind `tp train --set training.max_steps=50` (values
parsed from YAML text by the CLI) and the API's clone / sweep overrides (JSON values): `{"training.max_steps": 50,
"rewards.0.weight": 0.5}` -> a changed copy. A numeric part indexes a list; missing intermediate mappings are
created; descending into a scalar is an error; a mapping value replaces the whole section."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from training_platform.core.errors import InvalidInput

MAX_OVERRIDES = 100  # keys per request or command
MAX_OVERRIDE_DEPTH = 16  # dotted parts per key (a config is 4 deep)


class OverrideError(InvalidInput):
    def __init__(self, key: str, reason: str):
        self.key, self.reason = key, reason
        super().__init__([(key, reason)])


def apply_overrides(config: dict[str, Any], overrides: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """Apply (dotted key, value) pairs in order to a deep copy of `config`; OverrideError names the key."""
    pairs = list(overrides)
    if len(pairs) > MAX_OVERRIDES:
        raise OverrideError("", f"at most {MAX_OVERRIDES} keys, got {len(pairs)}")
    result = copy.deepcopy(config)
    for key, value in pairs:
        parts = key.strip().split(".")
        if not key.strip() or any(not p for p in parts):
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

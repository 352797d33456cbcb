"""Files the platform writes and hashes: content sha256, atomic writes (temp file in the same directory, then
rename: a reader sees the old file or the new one, never half of one), JSON and JSONL."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

_CHUNK = 1 << 20


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        while block := f.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


@contextlib.contextmanager
def atomic_outputs(*paths: str | Path | None) -> Iterator[list[Path | None]]:
    """Yield temp paths (same directories, same suffixes) for `paths`; on success rename every one of them over
    its destination, on any exception delete them all and leave the destinations untouched. None stays None."""
    temps: list[Path | None] = []
    try:
        for path in paths:
            if path is None:
                temps.append(None)
                continue
            path = Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=f".tmp{path.suffix}")
            os.close(fd)
            temps.append(Path(name))
        yield temps
    except BaseException:
        for temp in temps:
            if temp is not None:
                temp.unlink(missing_ok=True)
        raise
    for temp, path in zip(temps, paths, strict=True):
        if temp is not None and path is not None:
            os.replace(temp, path)


def atomic_write_text(path: str | Path, text: str) -> Path:
    with atomic_outputs(path) as (temp,):
        assert temp is not None
        temp.write_text(text, encoding="utf-8")
    return Path(path)


def json_default(value: Any) -> Any:
    import numpy as np

    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def write_json(path: str | Path, obj: Any) -> Path:
    """A report or metadata file, written atomically (numpy scalars and arrays, paths converted)."""
    return atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, default=json_default) + "\n")


def write_jsonl(path: str | Path, rows: Iterable[dict[str, Any]]) -> Path:
    with atomic_outputs(path) as (temp,):
        assert temp is not None
        with temp.open("w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False, default=json_default) + "\n")
    return Path(path)


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Every row of a JSONL file we wrote ourselves (blank lines skipped). User files go through data/io.py."""
    with Path(path).open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


# ---------------------------------------------------------------------------------------------- YAML


class _YAMLLoader(yaml.SafeLoader):
    """SafeLoader that reads `1e-5` as a float (PyYAML follows YAML 1.1, which wants `1.0e-5`)."""


_YAMLLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
                |[-+]?\.(?:inf|Inf|INF)
                |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def yaml_load(text_or_stream: Any) -> Any:
    """YAML as the platform reads config files: safe, and `1e-5` is a float."""
    return yaml.load(text_or_stream, Loader=_YAMLLoader)  # noqa: S506 - a SafeLoader subclass

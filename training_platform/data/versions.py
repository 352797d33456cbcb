"""Datasets as content-hashed versions.

A version is identified by the sha256 of its file's bytes. `DatasetVersion` describes one: rows, format, schema
(field name -> JSON type(s)), stats, and its lineage (the parent version's sha256 and the operation + parameters or
recipe that produced it). Plain dataclasses that round-trip through JSON so the DB layer can store them as-is.
"""

from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from training_platform.core.files import sha256_file, write_json
from training_platform.data.formats import ReadLimits, detect_format
from training_platform.data.io import atomic_output, iter_records

_CHUNK = 1 << 20


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


@dataclass
class DatasetVersion:
    sha256: str
    path: str
    rows: int
    format: str | None
    schema: dict[str, str] = field(default_factory=dict)  # field -> "string" | "string|null" | ...
    stats: dict[str, Any] = field(default_factory=dict)
    parent_sha256: str | None = None
    operation: str | None = None  # upload | validate | convert | clean | dedup | score | decontaminate | resample
    params: dict[str, Any] | None = None  # the operation's parameters (the whole recipe for clean)
    size_bytes: int = 0
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DatasetVersion:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


class SchemaTracker:
    """Row shapes seen while streaming: each row gets the id of its (field, JSON type) signature, so the schema of
    any subset of rows (e.g. the rows a dedup keeps) is known without reading them again."""

    def __init__(self) -> None:
        self._ids: dict[tuple, int] = {}
        self.signatures: list[tuple] = []

    def add(self, row: Any) -> int:
        return self.add_signature(self.signature(row))

    @staticmethod
    def signature(row: Any) -> tuple:
        """A row's shape: its (field, JSON type) pairs in order."""
        return tuple((k, json_type(v)) for k, v in row.items()) if isinstance(row, dict) else ()

    def add_signature(self, signature: tuple) -> int:
        """The id of a shape (from `signature`, maybe computed elsewhere: a Ray worker)."""
        sid = self._ids.get(signature)
        if sid is None:
            sid = self._ids[signature] = len(self.signatures)
            self.signatures.append(signature)
        return sid

    def schema(self, counts: dict[int, int]) -> dict[str, str]:
        """Schema of rows given as {signature id: number of rows}."""
        types: dict[str, set[str]] = {}
        present: dict[str, int] = {}
        total = sum(counts.values())
        for sid, n in counts.items():
            for key, kind in self.signatures[sid]:
                types.setdefault(key, set()).add(kind)
                present[key] = present.get(key, 0) + n
        for key, seen in types.items():  # a field missing from some rows is nullable
            if present[key] < total:
                seen.add("null")
        return {key: "|".join(sorted(seen, key=lambda t: (t == "null", t))) for key, seen in types.items()}


def describe_dataset(
    path: str | Path,
    *,
    parent_sha256: str | None = None,
    operation: str | None = None,
    params: dict[str, Any] | None = None,
    stats: dict[str, Any] | None = None,
    fmt: str | None = None,
    limits: ReadLimits | None = None,
) -> DatasetVersion:
    """Hash the file and scan its rows once for the row count, the format (of the first row, unless given) and the
    schema (the union of JSON types seen per top-level field; a field missing from some rows is nullable)."""
    path = Path(path)
    tracker = SchemaTracker()
    counts: dict[int, int] = {}
    rows = 0
    for record in iter_records(path, limits):
        rows += 1
        if fmt is None and isinstance(record.row, dict):
            fmt = detect_format(record.row)
        sid = tracker.add(record.row)
        counts[sid] = counts.get(sid, 0) + 1
    return DatasetVersion(
        sha256=sha256_file(path),
        path=str(path),
        rows=rows,
        format=fmt,
        schema=tracker.schema(counts),
        stats=stats or {},
        parent_sha256=parent_sha256,
        operation=operation,
        params=params,
        size_bytes=path.stat().st_size,
    )


def derived_version(
    output: str | Path,
    *,
    parent: str | Path | None = None,
    parent_sha256: str | None = None,
    operation: str,
    params: dict[str, Any] | None = None,
    stats: dict[str, Any] | None = None,
    fmt: str | None = None,
) -> dict[str, Any]:
    """The DatasetVersion (as a dict) of a file an operation produced from `parent`: what reports carry as
    `version`, so the chain upload -> clean -> dedup can be stored and queried by sha256."""
    if parent_sha256 is None and parent is not None:
        parent_sha256 = sha256_file(parent)
    return describe_dataset(
        output, parent_sha256=parent_sha256, operation=operation, params=params, stats=stats, fmt=fmt
    ).to_dict()


def store_version(src: str | Path, store_dir: str | Path, **describe_kwargs: Any) -> DatasetVersion:
    """Copy a dataset file into a content-addressed store: `<store>/<sha256><suffix>` plus `<sha256>.json` (the
    description). Storing the same content twice is a no-op that returns the same version."""
    src, store_dir = Path(src), Path(store_dir)
    version = describe_dataset(src, **describe_kwargs)
    target = store_dir / f"{version.sha256}{src.suffix.lower()}"
    if not target.exists():
        with atomic_output(target) as temp:
            shutil.copyfile(src, temp)
    version.path = str(target)
    meta = store_dir / f"{version.sha256}.json"
    if not meta.exists():
        write_json(meta, version.to_dict())
    return version

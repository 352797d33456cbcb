"""Path fields a user fills in, marked in the schema so that nothing that opens a file can slip past the path policy.

    class DataSection(StrictModel):
        train_file: UserFile = Field(...)

A field typed `UserPath` / `UserFile` / `UserDir` / `ModelRef` (also inside `X | None`, `list[X]`) carries a
`PathMarker`; `user_paths(model)` walks a validated pydantic model and yields every marked value with its field path,
so the API (at submission) and the workers (before opening anything) check the same set of fields with
`core.path_policy`. The annotation also bounds the value: no NUL, at most 4096 bytes, no component over
255 bytes (the limits of Linux file systems), so such a value is a 422 naming the field instead of a crash later.

This module imports nothing of the platform: the domain configs (training, evaluation, data operations) use it.
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import AfterValidator, BaseModel

MAX_PATH_BYTES = 4096
MAX_COMPONENT_BYTES = 255

Kind = Literal["file", "dir", "any", "model"]


@dataclass(frozen=True)
class PathMarker:
    """`kind`: what the path must name. `model`: a local model directory, or a registered model's name or a hub id
    `org/name` (which name nothing local and are resolved elsewhere)."""

    kind: Kind = "any"


def path_limit_problem(value: str) -> str | None:
    """Why `value` cannot be a path on this server, or None."""
    if "\x00" in value:
        return "must not contain NUL bytes"
    size = len(value.encode("utf-8", errors="surrogatepass"))
    if size > MAX_PATH_BYTES:
        return f"a path is at most {MAX_PATH_BYTES} bytes, got {size}"
    for part in value.split("/"):
        n = len(part.encode("utf-8", errors="surrogatepass"))
        if n > MAX_COMPONENT_BYTES:
            return f"a path component is at most {MAX_COMPONENT_BYTES} bytes, got one of {n} ({part[:24]!r}...)"
    return None


def _bounded(value: str) -> str:
    problem = path_limit_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


UserPath = Annotated[str, PathMarker("any"), AfterValidator(_bounded)]
UserFile = Annotated[str, PathMarker("file"), AfterValidator(_bounded)]
UserDir = Annotated[str, PathMarker("dir"), AfterValidator(_bounded)]
ModelRef = Annotated[str, PathMarker("model"), AfterValidator(_bounded)]


def marker_of(annotation: Any, metadata: list[Any] | tuple[Any, ...] = ()) -> PathMarker | None:
    """The PathMarker of a field (its metadata, or anywhere inside its annotation: `X | None`, `list[X]`)."""
    for item in metadata:
        if isinstance(item, PathMarker):
            return item
    if get_origin(annotation) is Annotated:
        found = marker_of(get_args(annotation)[0], get_args(annotation)[1:])
        if found is not None:
            return found
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType, list, tuple, set, frozenset):
        for arg in get_args(annotation):
            found = marker_of(arg)
            if found is not None:
                return found
    return None


def field_marker(model_cls: type[BaseModel], name: str) -> PathMarker | None:
    info = model_cls.model_fields[name]
    return marker_of(info.annotation, info.metadata)


def _loc(prefix: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{prefix}[{key}]"
    return f"{prefix}.{key}" if prefix else str(key)


def user_paths(obj: Any, prefix: str = "") -> Iterator[tuple[str, str, PathMarker]]:
    """Every marked, non-empty string value in a validated model (nested models, lists and dicts of models
    included), as (field path, value, marker)."""
    if isinstance(obj, BaseModel):
        for name in type(obj).model_fields:
            value = getattr(obj, name, None)
            loc = _loc(prefix, name)
            marker = field_marker(type(obj), name)
            if marker is not None:
                items = (
                    [(loc, value)]
                    if isinstance(value, str)
                    else [(_loc(loc, i), v) for i, v in enumerate(value)]
                    if isinstance(value, list | tuple)
                    else []
                )
                for where, item in items:
                    if isinstance(item, str) and item:
                        yield where, item, marker
            else:
                yield from user_paths(value, loc)
    elif isinstance(obj, list | tuple):
        for i, item in enumerate(obj):
            yield from user_paths(item, _loc(prefix, i))
    elif isinstance(obj, dict):
        for key, item in obj.items():
            if isinstance(item, BaseModel | list | tuple | dict):
                yield from user_paths(item, _loc(prefix, str(key)))


def _model_classes(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in get_args(annotation):
        for cls in _model_classes(arg):
            if cls not in found:
                found.append(cls)
    return found


def raw_user_paths(cls: type[BaseModel], raw: Any, prefix: str = "") -> Iterator[tuple[str, str, PathMarker]]:
    """Like `user_paths`, on raw (unvalidated) data guided by the schema of `cls`: the path fields of a config that
    failed validation elsewhere (every member of a union is tried), so their problems are reported too."""
    if not isinstance(raw, dict):
        return
    seen: set[str] = set()
    for name, info in cls.model_fields.items():
        key = info.alias or name
        if key not in raw:
            continue
        value, loc = raw[key], _loc(prefix, key)
        marker = marker_of(info.annotation, info.metadata)
        if marker is not None:
            items = (
                [(loc, value)]
                if isinstance(value, str)
                else [(_loc(loc, i), v) for i, v in enumerate(value)]
                if isinstance(value, list)
                else []
            )
            for where, item in items:
                if isinstance(item, str) and item and where not in seen:
                    seen.add(where)
                    yield where, item, marker
            continue
        for sub in _model_classes(info.annotation):
            entries = (
                [(loc, value)]
                if isinstance(value, dict)
                else [(_loc(loc, i), v) for i, v in enumerate(value)]
                if isinstance(value, list)
                else []
            )
            for where, item in entries:
                for found in raw_user_paths(sub, item, where):
                    if found[0] not in seen:
                        seen.add(found[0])
                        yield found

"""The platform's one error type: a problem is a list of (field path, reason) pairs, and its class says how it is
reported — `http_status` by the API (one exception handler, api/errors.py) and `exit_code` by the CLI (one guard,
cli/common.py). Domain errors subclass these (ConfigError, GateError, RecipeError, ...) and keep their names, so a
caller can catch exactly what it expects, while the API and the CLI need to know only this module.

    PlatformError            500 / exit 1   something went wrong that is not the caller's input
    │                                        (training/runner TrainingFailed, RankFailed: a run started and failed)
    ├─ InvalidInput          422 / exit 2   a config, request, file or row the rules refuse (also a ValueError)
    │                                        (data/formats.DatasetError: bad rows, 422 / exit 2, not a ValueError)
    │                                        (workers' DataJobFailed, EvalPreflightFailed: a job's input refused)
    ├─ NotFound              404 / exit 2
    ├─ Conflict              409 / exit 1   the object's current state does not allow it
    └─ Unavailable           503 / exit 1   a service the request needs is down

`translate_pydantic_error` / `pydantic_errors` turn pydantic's errors into (path, reason) pairs with readable paths
(`rewards[0].params.max_length`) and reasons (`must be >= 1, got 0`, `unknown field (did you mean 'x'?)`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Iterable, Mapping
from typing import Any


class FieldError(tuple[str, str]):
    """(path, reason); printed as `path: reason` (the reason alone when the problem has no field)."""

    def __new__(cls, path: str, reason: str) -> FieldError:
        return super().__new__(cls, (path, reason))

    def __getnewargs__(self) -> tuple[str, str]:  # pickle: (path, reason), not one tuple
        return (self[0], self[1])

    @property
    def path(self) -> str:
        return str(self[0])

    @property
    def reason(self) -> str:
        return str(self[1])

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}" if self.path else self.reason


Problems = Iterable[tuple[str, str]] | str


class PlatformError(Exception):
    """`errors`: every problem found, as FieldErrors. `message` (default: the problems joined by `separator`) is
    the exception's text."""

    http_status = 500
    exit_code = 1
    code = "error"
    separator = "; "

    def __init__(self, errors: Problems, *, message: str | None = None):
        if isinstance(errors, str):
            errors = [("", errors)]
        self.errors: list[FieldError] = [e if isinstance(e, FieldError) else FieldError(*e) for e in errors]
        super().__init__(message if message is not None else self.separator.join(str(e) for e in self.errors))

    def detail(self) -> list[dict[str, str]]:
        """The API's 4xx body items: `{"loc", "msg"}`."""
        return [{"loc": e.path, "msg": e.reason} for e in self.errors]


class InvalidInput(PlatformError, ValueError):
    http_status = 422
    exit_code = 2
    code = "invalid"


class Forbidden(PlatformError):
    http_status = 403
    exit_code = 1
    code = "forbidden"


class NotFound(PlatformError):
    http_status = 404
    exit_code = 2
    code = "not_found"


class Conflict(PlatformError):
    http_status = 409
    exit_code = 1
    code = "conflict"


class Unavailable(PlatformError):
    http_status = 503
    exit_code = 1
    code = "unavailable"


# ---------------------------------------------------------------------------------------------- pydantic

_UNION_MEMBER = re.compile(
    r"^(list|dict|tuple|set|literal|str|int|float|bool|none|function-\w+|constrained-\w+)(\[.*\])?$"
)


def _is_union_member(item: object) -> bool:
    return isinstance(item, str) and bool(_UNION_MEMBER.match(item))


def loc_to_path(loc: tuple[Any, ...], union_tags: Mapping[str, Collection[str]] | None = None) -> str:
    """('rewards', 0, 'params', 'x') -> `rewards[0].params.x`. pydantic inserts a union member's name (`int`,
    `list[str]`) or, for a discriminated union, the tag (`algorithm.grpo.beta`) into the location: both dropped."""
    parts: list[str] = []
    for i, item in enumerate(loc):
        if i > 0 and union_tags and item in union_tags.get(str(loc[i - 1]), ()):
            continue
        if _is_union_member(item):
            continue
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts) or "<root>"


def _got(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def translate_pydantic_error(
    err: Mapping[str, Any],
    prefix: str = "",
    known_fields: Collection[str] | None = None,
    union_tags: Mapping[str, Collection[str]] | None = None,
) -> FieldError:
    """One pydantic error -> FieldError. `prefix` places errors of a nested model (`rewards[0].params`);
    `known_fields` are the candidates of the "did you mean" hint for an unknown field; `union_tags` maps a
    discriminated union's field to its tags (dropped from paths, listed when the tag is wrong)."""
    loc = tuple(err["loc"])
    path = loc_to_path(loc, union_tags)
    if prefix:
        path = prefix if path == "<root>" else prefix + ("" if path.startswith("[") else ".") + path
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    if kind == "greater_than_equal":
        reason = f"must be >= {ctx['ge']}, got {_got(value)}"
    elif kind == "greater_than":
        reason = f"must be > {ctx['gt']}, got {_got(value)}"
    elif kind == "less_than_equal":
        reason = f"must be <= {ctx['le']}, got {_got(value)}"
    elif kind == "less_than":
        reason = f"must be < {ctx['lt']}, got {_got(value)}"
    elif kind == "extra_forbidden":
        key = str(loc[-1])
        close = difflib.get_close_matches(key, list(known_fields or ()), n=1)
        reason = "unknown field" + (f" (did you mean '{close[0]}'?)" if close else "")
    elif kind == "missing":
        reason = "required field is missing"
    elif kind == "literal_error":
        reason = f"must be one of {ctx.get('expected')}, got {_got(value)}"
    elif kind in ("union_tag_invalid", "union_tag_not_found"):
        field = str(loc[-1]) if loc else "value"
        tags = (union_tags or {}).get(field)
        expected = ", ".join(tags) if tags else str(ctx.get("expected_tags", ""))
        discriminator = str(ctx.get("discriminator", "")).strip("'\"")
        if discriminator:
            path = f"{path}.{discriminator}" if path != "<root>" else discriminator
        reason = (
            f"unknown {field} {_got(ctx.get('tag'))}; expected one of {expected}"
            if kind == "union_tag_invalid"
            else f"required field is missing; expected one of {expected}"
        )
    elif kind in ("int_type", "int_parsing", "int_from_float"):
        reason = f"must be an integer, got {_got(value)}"
    elif kind in ("float_type", "float_parsing"):
        reason = f"must be a number, got {_got(value)}"
    elif kind in ("bool_type", "bool_parsing"):
        reason = f"must be true or false, got {_got(value)}"
    elif kind == "string_type":
        reason = f"must be a string, got {_got(value)}"
    elif kind == "list_type":
        reason = f"must be a list, got {_got(value)}"
    elif kind in ("dict_type", "model_type", "model_attributes_type"):
        reason = f"must be a mapping, got {_got(value)}"
    elif kind == "enum":
        reason = f"must be one of {ctx.get('expected')}, got {_got(value)}"
    elif kind == "string_too_long":
        reason = f"must be at most {ctx.get('max_length')} characters"
    elif kind == "string_too_short":
        reason = "must not be empty"
    elif kind in ("value_error", "assertion_error"):
        reason = str(ctx.get("error", err["msg"])).removeprefix("Assertion failed, ")
    else:
        reason = f"{err['msg']}, got {_got(value)}"
    return FieldError(path, reason)


def pydantic_errors(
    exc: Any,
    prefix: str = "",
    known_fields: Collection[str] | None = None,
    union_tags: Mapping[str, Collection[str]] | None = None,
) -> list[FieldError]:
    """Every error of a pydantic ValidationError, translated, duplicates dropped; a value that fits no member of a
    union (reported once per member by pydantic) gets one `a, or b` reason."""
    by_path: dict[str, list[str]] = {}
    for err in exc.errors():
        error = translate_pydantic_error(err, prefix, known_fields, union_tags)
        reasons = by_path.setdefault(error.path, [])
        if error.reason not in reasons:
            reasons.append(error.reason)
    return [FieldError(path, ", or ".join(reasons)) for path, reasons in by_path.items()]

"""One error shape for every 4xx: `{"detail": "message"}` or, for validation, `{"detail": [{"loc", "msg"}, ...]}`.

Request validation errors (FastAPI's RequestValidationError) and the platform's own errors (core/errors.py: every
`InvalidInput` such as a job's `ConfigError`, and `NotFound` / `Conflict` / `Unavailable`) have one handler each:
invalid input in the list form, listing every problem with a readable field path, the others as one message.

The OpenAPI spec says so too (`document`): the 422 body is the real `{"detail": [{"loc": "a.b", "msg"}]}` (a
string `loc`, not FastAPI's list), and every operation lists the status codes it can answer: 401 when it needs a
token, 404 when its path names an object, 413/415/422 when it takes a body or parameters, plus the codes a route
declares with `responses(...)` (403, 409, ...). See docs/api-errors.md.
"""

from __future__ import annotations

import logging
import math
import os
import re
from typing import Any, cast

from fastapi import FastAPI, HTTPException, Request, status
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ExceptionHandler

from training_platform.api import schemas
from training_platform.core.errors import FieldError, InvalidInput, PlatformError
from training_platform.training.config import ConfigError, translate_pydantic_error

log = logging.getLogger("training_platform.api")

_BODY_MODELS: tuple[type[BaseModel], ...] = (
    schemas.JobCreate,
    schemas.JobClone,
    schemas.UserCreate,
    schemas.ModelCreate,
)
_BODY_MODELS += (schemas.SweepCreate, schemas.TemplateCreate)  # sweeps, templates
_BODY_MODELS += (schemas.JobUpdate, schemas.SavedViewCreate)  # the runs table: job tags and note, saved views
_BODY_FIELDS = {name for model in _BODY_MODELS for name in model.model_fields} | {
    # POST /evaluations and /schedules (their models live with their routers)
    "benchmarks",
    "generation",
    "backend",
    "sandbox",
    "seed",
    "model",
    "job_id",
    "checkpoint",
    "keep_best_by",
    "trigger",
    "cron",
    "every_n",
    "include_existing",
    "enabled",
    "max_new_tokens",
    "temperature",
    "top_p",
    "n_samples",
    "k",
    "stop",
    "chat",
    "n_shot",
    "system_prompt",
    "limit",
    # named endpoints (POST /endpoints; `endpoint` in evaluations, schedules and judge configs)
    "endpoint",
    "base_url",
    "api_key_env",
    "models",
}


def scrub(text: str) -> str:
    """An error message as a client may see it: paths inside the data dir relative to it (a temporary upload
    file named as such), and never this process's pid."""
    from training_platform.core.settings import get_settings

    try:
        root = str(get_settings().data_path)
    except Exception:  # noqa: BLE001 - settings that do not load: nothing to rewrite
        root = ""
    if root and root != "/":
        text = re.sub(
            re.escape(root) + r"/(?:[^\s'\"]*/)?tmp/[a-z]+-[0-9a-f]{32}[^\s'\":]*", "<the uploaded file>", text
        )
        text = text.replace(root + os.sep, "").replace(root, ".")
    pid = str(os.getpid())
    return re.sub(rf"(?<=[/._-]){pid}(?=[/._-]|\b)|(?<=pid[ =:]){pid}\b", "<pid>", text)


def _scrub_detail(detail: Any) -> Any:
    if isinstance(detail, str):
        return scrub(detail)
    if isinstance(detail, list):
        return [{**item, "msg": scrub(str(item.get("msg", "")))} if isinstance(item, dict) else item for item in detail]
    return detail


class ValidationFailed(HTTPException):
    """422 with `[{"loc", "msg"}, ...]`."""

    def __init__(self, errors: list[FieldError] | list[tuple[str, str]]):
        super().__init__(
            status.HTTP_422_UNPROCESSABLE_CONTENT, detail=[{"loc": loc, "msg": msg} for loc, msg in errors]
        )


def config_error(exc: ConfigError, prefix: str = "") -> ValidationFailed:
    return ValidationFailed([((prefix + e.path) if prefix else e.path, e.reason) for e in exc.errors])


def not_found(what: str) -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, detail=f"{what} not found")


def conflict(message: str) -> HTTPException:
    return HTTPException(status.HTTP_409_CONFLICT, detail=message)


def forbidden(message: str) -> HTTPException:
    return HTTPException(status.HTTP_403_FORBIDDEN, detail=message)


# ---------------------------------------------------------------------------------------------- the spec

DESCRIPTIONS = {
    400: "Malformed request (e.g. a multipart body without a boundary)",
    401: "Missing, invalid or revoked token",
    403: "Not allowed for this user (e.g. admin only)",
    404: "No such object, or not visible to this user",
    409: "Conflicts with the object's current state",
    410: "The object's file is gone",
    413: "The body or upload is too large",
    415: "The body is not sent as JSON (or, for uploads, as multipart/form-data)",
    422: "Validation failed: every problem, each with the field path (`loc`) and the reason (`msg`)",
    503: "A service the request needs (database, broker) is unavailable",
}


def responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a route: the error codes it answers besides the ones `document` adds by itself."""
    return {
        code: {
            "model": schemas.ValidationErrorOut if code == 422 else schemas.ErrorOut,
            "description": DESCRIPTIONS[code],
        }
        for code in codes
    }


def _error_response(code: int, ref: str) -> dict[str, Any]:
    return {
        "description": DESCRIPTIONS[code],
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{ref}"}}},
    }


def _document_operation(operation: dict[str, Any]) -> None:
    answers = operation.setdefault("responses", {})
    params = operation.get("parameters") or []
    body = operation.get("requestBody")
    added: list[tuple[int, str]] = []
    if operation.get("security"):
        added.append((401, "ErrorOut"))
    if any(p.get("in") == "path" for p in params):
        added.append((404, "ErrorOut"))
    if body is not None:
        added.append((413, "ErrorOut"))
        if "application/json" in (body.get("content") or {}):
            added.append((415, "ErrorOut"))
    if params or body is not None:
        added.append((422, "ValidationErrorOut"))
    for code, ref in added:
        answers.setdefault(str(code), _error_response(code, ref))
    if "422" in answers:  # FastAPI's HTTPValidationError (a list `loc`) is not what this API returns
        answers["422"] = _error_response(422, "ValidationErrorOut")


def document(app: FastAPI) -> None:
    """Post-process the generated spec once (see the module docstring)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if getattr(app.state, "openapi_documented", False):
            assert app.openapi_schema is not None  # set together with openapi_documented, below
            return app.openapi_schema
        spec = generate()
        components = spec.setdefault("components", {}).setdefault("schemas", {})
        for model in (schemas.ErrorItem, schemas.ErrorOut, schemas.ValidationErrorOut):
            definition = model.model_json_schema(ref_template="#/components/schemas/{model}")
            for name, sub in definition.pop("$defs", {}).items():
                components.setdefault(name, sub)
            components[model.__name__] = definition
        for name in ("HTTPValidationError", "ValidationError"):
            components.pop(name, None)
        for path_item in spec.get("paths", {}).values():
            for method, operation in path_item.items():
                if method in ("get", "post", "put", "patch", "delete"):
                    _document_operation(operation)
        app.openapi_schema = spec
        app.state.openapi_documented = True
        return spec

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to customise the spec


# ---------------------------------------------------------------------------------------------- JSON bodies

MAX_JSON_DEPTH = 32  # nesting of objects and arrays in any JSON body (a training config needs 4)


BODY_VALUE_ERROR = "tp_body_value"  # the `type` of check_json_value's errors
_SURROGATE = re.compile("[\ud800-\udfff]")


def check_json_value(value: Any, loc: tuple = ()) -> list[dict[str, Any]]:
    """Problems PostgreSQL or the recursion limit would otherwise meet later: non-finite numbers (Python's json
    module accepts `NaN` and `Infinity`), NUL characters and lone surrogates (PostgreSQL stores neither), nesting
    deeper than MAX_JSON_DEPTH. Pydantic-style
    errors (`loc` from the body root) so they are reported like any validation error."""
    problems: list[dict[str, Any]] = []

    def problem(where: tuple, msg: str) -> None:
        problems.append({"type": BODY_VALUE_ERROR, "loc": where, "msg": msg, "input": None})

    stack: list[tuple[Any, tuple]] = [(value, loc)]
    while stack and len(problems) < 20:
        node, where = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            problem(where, f"must be a finite number, got {node}")
        elif isinstance(node, str) and "\x00" in node:
            problem(where, "must not contain NUL (\\u0000) characters")
        elif isinstance(node, str) and _SURROGATE.search(node):
            problem(where, "must be valid Unicode (a lone surrogate such as \\ud800 cannot be stored)")
        elif isinstance(node, dict | list):
            if len(where) - len(loc) >= MAX_JSON_DEPTH:
                problem(where, f"nested too deeply (at most {MAX_JSON_DEPTH} levels)")
                continue
            items = node.items() if isinstance(node, dict) else enumerate(node)
            for key, item in items:
                if isinstance(key, str) and ("\x00" in key or _SURROGATE.search(key)):
                    problem(where, "keys must not contain NUL (\\u0000) characters or lone surrogates")
                stack.append((item, (*where, key)))
    return problems


def _request_error(err: dict) -> dict[str, str]:
    loc = tuple(err.get("loc") or ())
    source, rest = (loc[0], loc[1:]) if loc else ("body", ())
    if err.get("type") == BODY_VALUE_ERROR:
        if source == "body" and len(rest) > 1 and rest[0] == "config":
            rest = rest[1:]  # a job config's fields are named as in the YAML, like its other errors
        return {"loc": _dotted(source, rest), "msg": err["msg"]}
    if err.get("type") == "json_invalid":
        ctx = err.get("ctx") or {}
        where = f" at position {rest[0]}" if rest and isinstance(rest[0], int) else ""
        return {"loc": "<body>", "msg": f"malformed JSON: {ctx.get('error', 'cannot decode')}{where}"}
    if source == "body" and not rest and err.get("type") == "missing":
        return {"loc": "<body>", "msg": "a JSON object body is required"}
    path, reason = translate_pydantic_error({**err, "loc": rest}, known_fields=_BODY_FIELDS)
    if err.get("type") in ("dict_type", "model_attributes_type") and not rest and source == "body":
        reason = f"the body must be a JSON object, got {type(err.get('input')).__name__}"
    if err.get("type") == "enum":
        reason = f"must be one of {(err.get('ctx') or {}).get('expected')}, got {err.get('input')!r}"
    if err.get("type") == "string_pattern_mismatch":
        reason = "may only contain letters, digits, '_', '.', '-' and must start with a letter or digit"
    if err.get("type") == "string_too_long":
        reason = f"must be at most {(err.get('ctx') or {}).get('max_length')} characters"
    if source == "body":
        return {"loc": "<body>" if path == "<root>" else path, "msg": reason}
    return {"loc": f"{source}.{path}" if path != "<root>" else str(source), "msg": reason}


def _dotted(source: Any, rest: tuple) -> str:
    path, _ = translate_pydantic_error({"type": "missing", "loc": rest, "msg": ""})
    if source == "body":
        return "<body>" if path == "<root>" else path
    return str(source) if path == "<root>" else f"{source}.{path}"


async def _on_http_exception(request: Request, exc: StarletteHTTPException) -> Response:
    # FastAPI answers 400 "There was an error parsing the body" for a JSON body it cannot decode at all (not
    # UTF-8, nested past the recursion limit): a body problem like any other malformed JSON.
    if exc.status_code == 400 and exc.detail == "There was an error parsing the body":
        cause = exc.__cause__
        reason = (
            "nested too deeply"
            if isinstance(cause, RecursionError)
            else "not UTF-8 text"
            if isinstance(cause, UnicodeDecodeError)
            else "cannot decode"
        )
        return JSONResponse(
            {"detail": [{"loc": "<body>", "msg": f"malformed JSON: {reason}"}]},
            status_code=status.HTTP_422_UNPROCESSABLE_CONTENT,
        )
    if 400 <= exc.status_code < 500:
        exc.detail = _scrub_detail(exc.detail)
    return await http_exception_handler(request, exc)


async def _on_request_validation(request: Request, exc: RequestValidationError) -> JSONResponse:
    seen: list[dict[str, str]] = []
    for err in exc.errors():
        item = _request_error(err)
        if item not in seen:
            seen.append(item)
    return JSONResponse({"detail": seen}, status_code=status.HTTP_422_UNPROCESSABLE_CONTENT)


async def _on_platform_error(request: Request, exc: PlatformError) -> JSONResponse:
    """The platform's own errors (core/errors.py), whatever raised them: invalid input as the field list, the
    others (not found, conflict, unavailable) as one message. An IllegalTransition is a worker that moved the job
    between our read and our write: 409."""
    if isinstance(exc, InvalidInput) or exc.http_status == 422:
        detail: Any = [{"loc": e.path, "msg": scrub(e.reason)} for e in exc.errors]
    else:
        detail = scrub(str(exc))
    return JSONResponse({"detail": detail}, status_code=exc.http_status)


async def _on_unhandled(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return JSONResponse({"detail": "internal server error"}, status_code=500)


def install(app: FastAPI) -> None:
    # Starlette types every handler as taking any Exception; each of these is only called with its own class.
    app.add_exception_handler(StarletteHTTPException, cast(ExceptionHandler, _on_http_exception))
    app.add_exception_handler(RequestValidationError, cast(ExceptionHandler, _on_request_validation))
    app.add_exception_handler(PlatformError, cast(ExceptionHandler, _on_platform_error))
    app.add_exception_handler(Exception, _on_unhandled)
    document(app)

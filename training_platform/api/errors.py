"""One error shape for every 4xx: `{"detail": "message"}` or, for validation, `{"detail": [{"loc", "msg"}, ...]}`.

Request validation errors (FastAPI's RequestValidationError) and job config errors (the training config's own
`ConfigError`) are both turned into the list form, listing every problem with a readable field path.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, HTTPException, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from training_platform.api import schemas
from training_platform.db.models import IllegalTransition
from training_platform.training.config import ConfigError, FieldError, translate_pydantic_error

log = logging.getLogger("training_platform.api")

_BODY_MODELS = (schemas.JobCreate, schemas.JobClone, schemas.UserCreate, schemas.ModelCreate)
_BODY_FIELDS = {name for model in _BODY_MODELS for name in model.model_fields} | {
    # POST /evaluations and /schedules (their models live with their routers)
    "benchmarks", "generation", "backend", "sandbox", "seed", "model", "job_id", "checkpoint", "keep_best_by",
    "trigger", "cron", "every_n", "include_existing", "enabled", "max_new_tokens", "temperature", "top_p",
    "n_samples", "k", "stop", "chat", "n_shot", "system_prompt", "limit",
    # named endpoints (POST /endpoints; `endpoint` in evaluations, schedules and judge configs)
    "endpoint", "base_url", "api_key_env", "models"}


class ValidationFailed(HTTPException):
    """422 with `[{"loc", "msg"}, ...]`."""

    def __init__(self, errors: list[FieldError] | list[tuple[str, str]]):
        super().__init__(status.HTTP_422_UNPROCESSABLE_CONTENT,
                         detail=[{"loc": loc, "msg": msg} for loc, msg in errors])


def config_error(exc: ConfigError, prefix: str = "") -> ValidationFailed:
    return ValidationFailed([((prefix + e.path) if prefix else e.path, e.reason) for e in exc.errors])


def not_found(what: str) -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, detail=f"{what} not found")


def conflict(message: str) -> HTTPException:
    return HTTPException(status.HTTP_409_CONFLICT, detail=message)


def forbidden(message: str) -> HTTPException:
    return HTTPException(status.HTTP_403_FORBIDDEN, detail=message)


def _request_error(err: dict) -> dict[str, str]:
    loc = tuple(err.get("loc") or ())
    source, rest = (loc[0], loc[1:]) if loc else ("body", ())
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


async def _on_request_validation(request: Request, exc: RequestValidationError) -> JSONResponse:
    seen: list[dict[str, str]] = []
    for err in exc.errors():
        item = _request_error(err)
        if item not in seen:
            seen.append(item)
    return JSONResponse({"detail": seen}, status_code=status.HTTP_422_UNPROCESSABLE_CONTENT)


async def _on_config_error(request: Request, exc: ConfigError) -> JSONResponse:
    return JSONResponse({"detail": [{"loc": e.path, "msg": e.reason} for e in exc.errors]},
                        status_code=status.HTTP_422_UNPROCESSABLE_CONTENT)


async def _on_illegal_transition(request: Request, exc: IllegalTransition) -> JSONResponse:
    # A worker moved the job between our read and our write.
    return JSONResponse({"detail": str(exc)}, status_code=status.HTTP_409_CONFLICT)


async def _on_unhandled(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return JSONResponse({"detail": "internal server error"}, status_code=500)


def install(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _on_request_validation)
    app.add_exception_handler(ConfigError, _on_config_error)
    app.add_exception_handler(IllegalTransition, _on_illegal_transition)
    app.add_exception_handler(Exception, _on_unhandled)

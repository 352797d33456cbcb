"""Registered models: a name for a local Hugging Face model directory, usable as `model.path` in job configs."""

from __future__ import annotations

import json
import logging
import math
import struct
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response, status
from pydantic import Field
from sqlalchemy import func
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from training_platform.api import errors, schemas
from training_platform.api.deps import CurrentUser, JsonBody, SessionDep, SettingsDep
from training_platform.api.errors import ValidationFailed, conflict, forbidden, not_found
from training_platform.core.path_policy import check_path, resolve_path, shown
from training_platform.core.settings import Settings
from training_platform.db.models import RegisteredModel, User
from training_platform.services.access import model_visible, model_visible_clause, reader_for

log = logging.getLogger("training_platform.api.models")

router = APIRouter(prefix="/models", tags=["models"])

WEIGHT_FILES = ("*.safetensors", "pytorch_model*.bin", "*.safetensors.index.json")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def count_parameters(model_dir: Path) -> int | None:
    """Sum of tensor sizes from the safetensors headers (reads a few KB, never the weights)."""
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    try:
        for file in files:
            with file.open("rb") as f:
                (length,) = struct.unpack("<Q", f.read(8))
                if length > 100 * 2**20:
                    return None
                header = json.loads(f.read(length))
            total += sum(math.prod(t["shape"]) for k, t in header.items() if k != "__metadata__")
    except (OSError, ValueError, KeyError, TypeError, struct.error):
        return None
    return total


def inspect_model(path: Path) -> dict[str, Any]:
    """Load the config and tokenizer locally (no hub, no remote code). Raises ValueError with the reason."""
    if not path.is_dir():
        raise ValueError(f"{path} is not a directory")
    from transformers import AutoConfig, AutoTokenizer

    try:
        config = AutoConfig.from_pretrained(str(path), local_files_only=True, trust_remote_code=False)
    except Exception as exc:  # noqa: BLE001 - any failure is the user's model directory
        raise ValueError(f"cannot load the model config: {_first_line(exc)}") from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True, trust_remote_code=False)
    except Exception as exc:  # noqa: BLE001
        raise ValueError(f"cannot load the tokenizer: {_first_line(exc)}") from None
    # transformers builds an empty tokenizer when the tokenizer files are missing: it must encode something.
    try:
        encoded = tokenizer("Hello, 1+2=3")["input_ids"]
    except Exception as exc:  # noqa: BLE001
        raise ValueError(f"the tokenizer cannot encode text: {_first_line(exc)}") from None
    if len(tokenizer) <= 1 or not encoded:
        raise ValueError("cannot load the tokenizer: it has no vocabulary (tokenizer.json / vocab files missing?)")
    weights = [p for pattern in WEIGHT_FILES for p in path.glob(pattern)]
    if not weights:
        raise ValueError(f"no weights in {path} (expected {', '.join(WEIGHT_FILES)})")
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    return {
        "model_type": getattr(config, "model_type", None),
        "architectures": getattr(config, "architectures", None),
        "vocab_size": getattr(text_config, "vocab_size", None),
        "max_position_embeddings": getattr(text_config, "max_position_embeddings", None),
        "num_parameters": count_parameters(path),
        "has_chat_template": bool(getattr(tokenizer, "chat_template", None)),
    }


class ModelUpdate(schemas.RequestBody):
    shared: bool | None = Field(
        None, description="Let every user see and use the model (only the owner and admins change or delete it)."
    )


def _model_read(session: Session, model: RegisteredModel, settings: Settings) -> dict:
    owner = session.get(User, model.owner_id) if model.owner_id is not None else None
    info = dict(model.info or {})
    if isinstance(info.get("demo_data"), str):
        info["demo_data"] = shown(info["demo_data"], settings)
    return {
        **model.model_dump(),
        "path": shown(model.path, settings),
        "info": info,
        "owner": owner.name if owner else None,
    }


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=schemas.ModelRead,
    dependencies=[JsonBody],
    responses=errors.responses(409),
)
def register_model(body: schemas.ModelCreate, session: SessionDep, user: CurrentUser, settings: SettingsDep):
    """The path must lie inside the allowed roots and load as a Hugging Face model (config + tokenizer)."""
    if session.exec(select(RegisteredModel).where(RegisteredModel.name == body.name)).first() is not None:
        raise conflict(f"a model named {body.name!r} already exists")
    error = check_path("path", body.path, settings, reader_for(session, user))
    if error is not None:
        raise ValidationFailed([error])
    path = resolve_path(body.path, settings)
    try:
        info = inspect_model(path)
    except ValueError as exc:
        raise ValidationFailed([("path", str(exc).replace(str(path), shown(path, settings)))]) from None
    model = RegisteredModel(name=body.name, path=str(path), owner_id=user.id, info=info)
    session.add(model)
    try:
        session.commit()
    except IntegrityError:
        session.rollback()
        raise conflict(f"a model named {body.name!r} already exists") from None
    log.info("model %r registered by %s: %s", model.name, user.name, path)
    return _model_read(session, model, settings)


@router.get("", response_model=schemas.Page[schemas.ModelRead])
def list_models(
    session: SessionDep,
    user: CurrentUser,
    settings: SettingsDep,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    offset: schemas.Offset = 0,
):
    """Your models, shared ones and the platform's (the demo); admins see all."""
    conditions = [] if user.is_admin else [model_visible_clause(user)]
    total = session.exec(select(func.count()).select_from(RegisteredModel).where(*conditions)).one()
    rows = session.exec(
        select(RegisteredModel).where(*conditions).order_by(RegisteredModel.name).limit(limit).offset(offset)
    ).all()
    return {
        "items": [_model_read(session, m, settings) for m in rows],
        "total": total,
        "limit": limit,
        "offset": offset,
    }


def _get_model(session: Session, user, model_id: int) -> RegisteredModel:
    """The model if this user may see it; another user's unshared model is 404."""
    model = session.get(RegisteredModel, model_id)
    if model is None or not model_visible(user, model):
        raise not_found(f"model {model_id}")
    return model


def _owned_model(session: Session, user, model_id: int, action: str) -> RegisteredModel:
    model = _get_model(session, user, model_id)
    if not user.is_admin and model.owner_id != user.id:
        raise forbidden(f"only the owner of model {model_id} or an admin can {action} it")
    return model


@router.get("/{model_id}", response_model=schemas.ModelRead)
def get_model(model_id: schemas.DbId, session: SessionDep, user: CurrentUser, settings: SettingsDep):
    return _model_read(session, _get_model(session, user, model_id), settings)


@router.patch(
    "/{model_id}",
    response_model=schemas.ModelRead,
    dependencies=[JsonBody],
    responses={
        403: {"model": schemas.ErrorOut, "description": "A shared or platform model"},
        404: {"model": schemas.ErrorOut, "description": "No such model, or another user's"},
    },
)
def update_model(
    model_id: schemas.DbId, body: ModelUpdate, session: SessionDep, user: CurrentUser, settings: SettingsDep
):
    """Owner or admin: `{"shared": true}` lets every user see the model and use it (its directory becomes
    readable to their jobs)."""
    model = _owned_model(session, user, model_id, "change")
    if body.shared is not None and body.shared != model.shared:
        model.shared = body.shared
        session.add(model)
        session.commit()
        log.info("model %r %s by %s", model.name, "shared" if model.shared else "unshared", user.name)
    return _model_read(session, model, settings)


@router.delete(
    "/{model_id}", status_code=status.HTTP_204_NO_CONTENT, response_class=Response, responses=errors.responses(403)
)
def delete_model(model_id: schemas.DbId, session: SessionDep, user: CurrentUser):
    """Admins or the owner. Removes the registration only, never the files."""
    model = _owned_model(session, user, model_id, "delete")
    session.delete(model)
    session.commit()
    log.info("model %r unregistered by %s", model.name, user.name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)

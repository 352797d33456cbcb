"""The training config's JSON Schema (the UI builds its launch form from it)."""

from __future__ import annotations

from functools import lru_cache

from fastapi import APIRouter

from training_platform.api.deps import CurrentUser
from training_platform.training.config import json_schema

router = APIRouter(prefix="/config", tags=["config"])


@lru_cache
def _schema() -> dict:
    return json_schema()


@router.get("/schema")
def config_schema(user: CurrentUser) -> dict:
    return _schema()

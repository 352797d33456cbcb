"""The training config's JSON Schema and the example configs (the UI builds its launch form from them)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml
from fastapi import APIRouter
from pydantic import BaseModel

from training_platform.api.deps import CurrentUser
from training_platform.training.config import json_schema

router = APIRouter(prefix="/config", tags=["config"])

# configs/examples beside the package (a checkout, and the Docker image's /app/configs).
EXAMPLES_DIR = Path(__file__).resolve().parents[3] / "configs" / "examples"


class ExampleConfig(BaseModel):
    name: str
    algorithm: str
    description: str
    config: dict


@lru_cache
def _schema() -> dict:
    return json_schema()


@lru_cache
def _examples() -> tuple[ExampleConfig, ...]:
    out = []
    for path in sorted(EXAMPLES_DIR.glob("*.yaml")) if EXAMPLES_DIR.is_dir() else []:
        text = path.read_text()
        config = yaml.safe_load(text)
        if not isinstance(config, dict):
            continue
        comments = []
        for line in text.splitlines():  # the leading comment block says what the example is for
            if not line.startswith("#"):
                break
            comments.append(line.lstrip("# ").rstrip())
        out.append(
            ExampleConfig(
                name=path.stem,
                algorithm=str(config.get("algorithm", {}).get("name", "")),
                description=" ".join(comments),
                config=config,
            )
        )
    return tuple(out)


@router.get("/schema")
def config_schema(user: CurrentUser) -> dict:
    return _schema()


@router.get("/examples", response_model=list[ExampleConfig])
def config_examples(user: CurrentUser):
    """The example configs shipped with the platform (`configs/examples/*.yaml`), to start a job from."""
    return list(_examples())

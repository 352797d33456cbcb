"""The training config's JSON Schema and the example configs (the UI builds its launch form from them)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml
from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from training_platform.api.deps import CurrentUser
from training_platform.training.config import json_schema
from training_platform.training.tools import TOOLS, tool_names

router = APIRouter(prefix="/config", tags=["config"])

# configs/examples beside the package (a checkout, and the Docker image's /app/configs).
EXAMPLES_DIR = Path(__file__).resolve().parents[3] / "configs" / "examples"


class ToolInfo(BaseModel):
    name: str
    description: str
    schema_: dict = Field(alias="schema", description="The OpenAI function schema the model sees in its tool list.")
    params_schema: dict = Field(description="JSON Schema of the tool's settings in a job (`agent.tools[i].params`).")

    model_config = ConfigDict(populate_by_name=True)


class ExampleConfig(BaseModel):
    name: str
    algorithm: str
    description: str
    config: dict


@lru_cache
def _schema() -> dict:
    schema = json_schema()
    # agent.tools[].name: a choice among the registered tools (the launch form renders an enum as a select)
    tool = schema.get("$defs", {}).get("AgentToolSection", {}).get("properties", {}).get("name")
    if tool is not None:
        tool["enum"] = tool_names()
    return schema


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


@router.get("/tools", response_model=list[ToolInfo], response_model_by_alias=True)
def config_tools(user: CurrentUser):
    """The tools an RL job's `agent.tools` may name (the registry), each with the function schema the model is shown
    (a job's params may change its description) and the schema of its settings: what the launch form offers."""
    out = []
    for name in tool_names():
        tool = TOOLS[name]
        function = {"name": name, "description": tool.description, "parameters": tool.parameters}
        out.append(
            ToolInfo(
                name=name,
                description=tool.description,
                schema_={"type": "function", "function": function},
                params_schema=tool.params_model.model_json_schema(),
            )
        )
    return out


@router.get("/examples", response_model=list[ExampleConfig])
def config_examples(user: CurrentUser):
    """The example configs shipped with the platform (`configs/examples/*.yaml`), to start a job from."""
    return list(_examples())

"""Our tool registry as verl tools, and the tools YAML verl loads them from.

verl's agent-loop worker reads `actor_rollout_ref.rollout.multi_turn.tool_config_path` once per worker
(`verl/tools/tool_registry.py`): `tools: [{class_name, config: {type: native, ...}, tool_schema}]`, each class
imported by name and built as `cls(config=..., tool_schema=...)`. Every entry here is a `PlatformTool` whose config
is `{type: native, tool, params, timeout_s, call_reward, error_reward}`; the schema is the registry's
(`training.tools.tool_schema`), so the chat template shows the model exactly what `call_tool` checks.

The file also carries an `episode:` section verl ignores and our loop reads (`EpisodeSettings`): the call budget,
the per-call deadline and the per-call rewards of `agent:`. The YAML holds the job's tool params (endpoint names,
models), never a secret: an endpoint's key stays in its environment variable.

A tool instance is shared by every trajectory of a worker: `execute` keeps no state; the registry's run is called in
a worker thread (`asyncio.to_thread`), so a sandboxed `python` call does not block the other trajectories.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from training_platform.training.tools import ToolResult, build_tool, tool_schema

if TYPE_CHECKING:  # pragma: no cover
    from training_platform.training.config import AgentSection

CLASS_NAME = "training_platform.training.engines.verl.agent.tools.PlatformTool"


class PlatformTool(BaseTool):
    """One registered tool of the job, called as verl calls a tool: `create`, `execute`, `release`."""

    def __init__(self, config: dict[str, Any], tool_schema: OpenAIFunctionToolSchema | None = None):
        name = config["tool"]
        params = dict(config.get("params") or {})
        self._tool = build_tool(name, params)  # KeyError / ValidationError: the config rules refuse these first
        if tool_schema is None:
            tool_schema = OpenAIFunctionToolSchema.model_validate(self._tool.schema())
        self.config = config
        self.tool_schema = tool_schema
        self.name = tool_schema.function.name  # (BaseTool.__init__ only adds a print of the schema)
        self.timeout_s = float(config.get("timeout_s", 5.0))
        self.call_reward = float(config.get("call_reward", 0.0))
        self.error_reward = float(config.get("error_reward", 0.0))

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any):
        """`(ToolResponse(text), reward, {"ok", "latency_s"})`: whatever the model sent, never an exception."""
        result: ToolResult = await asyncio.to_thread(self._tool, parameters, timeout_s=self.timeout_s)
        reward = self.call_reward if result.ok else self.error_reward
        return ToolResponse(text=result.text), reward, {"ok": result.ok, "latency_s": result.latency_s}


@dataclass(frozen=True)
class EpisodeSettings:
    """The limits of one episode our loop enforces (the `episode:` section of the tools YAML)."""

    max_tool_calls: int = 64
    tool_timeout_s: float = 5.0
    tool_call_reward: float = 0.0
    tool_error_reward: float = 0.0


def tools_config(agent: AgentSection) -> dict[str, Any]:
    """The tools YAML's content for `agent`."""
    tools = []
    for tool in agent.tools:
        config = {
            "type": "native",
            "tool": tool.name,
            "params": dict(tool.params),
            "timeout_s": agent.tool_timeout_s,
            "call_reward": agent.tool_call_reward,
            "error_reward": agent.tool_error_reward,
        }
        tools.append({"class_name": CLASS_NAME, "config": config, "tool_schema": tool_schema(tool.name, tool.params)})
    episode = EpisodeSettings(
        max_tool_calls=agent.max_tool_calls,
        tool_timeout_s=agent.tool_timeout_s,
        tool_call_reward=agent.tool_call_reward,
        tool_error_reward=agent.tool_error_reward,
    )
    return {"tools": tools, "episode": episode.__dict__}


def write_tools_config(path: Path, agent: AgentSection) -> Path:
    """Write the tools YAML of `agent` at `path` (atomically); returns `path`."""
    import yaml

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(tools_config(agent), sort_keys=False))
    tmp.replace(path)
    return path


@lru_cache(maxsize=8)
def episode_settings(path: str | None) -> EpisodeSettings:
    """The `episode:` section of the tools YAML at `path` (verl makes one loop per trajectory: read once)."""
    if not path:
        return EpisodeSettings()
    import yaml

    raw = yaml.safe_load(Path(path).read_text()) or {}
    known = EpisodeSettings.__dataclass_fields__
    return EpisodeSettings(**{k: v for k, v in (raw.get("episode") or {}).items() if k in known})


SANDBOX_PREFIX = "TP_SANDBOX_"
ENDPOINT_VARS = ("TP_ENDPOINTS", "TP_ENDPOINTS_FILE")


def runtime_env_vars(agent: AgentSection | None, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """What the agent-loop workers need from this process's environment (the Ray runtime env of the run): the
    sandbox's settings when `python` is a tool; the operator's endpoints and the key variable of each endpoint an
    `http_endpoint` tool names, and no other variable (Ray's runtime env is visible to the cluster's users). Values
    are passed, never logged; the tools YAML never holds them."""
    if agent is None:
        return {}
    environ = os.environ if environ is None else environ
    names = {tool.name for tool in agent.tools}
    out: dict[str, str] = {}
    if "python" in names:
        out.update({k: v for k, v in environ.items() if k.startswith(SANDBOX_PREFIX)})
    endpoints = [str(t.params.get("endpoint", "")) for t in agent.tools if t.name == "http_endpoint"]
    if endpoints:
        out.update({k: environ[k] for k in ENDPOINT_VARS if k in environ})
        from types import SimpleNamespace

        from training_platform.core.endpoints import EndpointError, env_endpoints

        settings = SimpleNamespace(
            endpoints_json=environ.get(ENDPOINT_VARS[0]), endpoints_file=environ.get(ENDPOINT_VARS[1])
        )
        try:
            known = env_endpoints(settings)
        except EndpointError:  # preflight says what is wrong with them; the tool answers with an error text
            known = {}
        for name in endpoints:
            key_env = known[name].api_key_env if name in known else None
            if key_env and key_env in environ:
                out[key_env] = environ[key_env]
    return out

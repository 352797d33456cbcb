"""Tool registry for agentic RL (`agent.tools` of a job): the tools a model may call during its rollout.

Every tool lives in its own module and registers one factory with `@register_tool`, as rewards do:

    class EchoArgs(ToolArgs):
        text: str = Field(max_length=100, description="What to echo.")

    @register_tool("echo", EchoArgs, NoParams, "Echo the text back.")
    def build_echo(params: NoParams) -> ToolRun:
        def run(args: EchoArgs, *, timeout_s: float) -> ToolResult:
            return ToolResult(args.text, ok=True)
        return run

then one import line at the bottom of this file. `ToolArgs` is what the model sends (strict, unknown keys refused):
its JSON schema, flattened to what verl's `OpenAIFunctionToolSchema` holds (a property is {type, description,
enum}), is the function schema shown in the chat template's tool list (`tool_schema`). `ToolParams` are the job's
fixed settings (`agent.tools[i].params`), checked by the config rules.

`call_tool(name, params, raw_args, timeout_s)` is the one way a call runs: the model's arguments (a JSON text or a
mapping, at most `MAX_ARGS_CHARS`) are checked against the tool's schema, the tool runs, its text is cut to
`MAX_RESULT_CHARS`, and the latency is measured. Whatever the model sends - an unknown tool, bad JSON, arguments
failing the schema - and whatever the tool raises, the answer is a `ToolResult` with `ok=False` and the error as its
text (what the model sees next), never an exception. Each tool honours `timeout_s` itself (the sandbox's wall clock,
the HTTP client's timeout; the calculator is bounded by construction); the agent loop adds its own deadline around
the call. A tool instance is shared by every trajectory of a worker: factories return stateless, thread-safe runs.

Engine-neutral and light to import (config validation reads it): no torch, verl or httpx at module level.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

__all__ = [
    "MAX_ARGS_CHARS",
    "MAX_RESULT_CHARS",
    "MAX_TIMEOUT_S",
    "TOOLS",
    "NoParams",
    "ToolArgs",
    "ToolDefinition",
    "ToolParams",
    "ToolResult",
    "ToolRun",
    "build_tool",
    "call_tool",
    "get_tool",
    "register_tool",
    "tool_names",
    "tool_schema",
    "truncate",
]

MAX_ARGS_CHARS = 16 * 1024  # the model's JSON arguments of one call
MAX_RESULT_CHARS = 8 * 1024  # a tool's text as the model sees it (verl's max_tool_response_length is set to it)
MAX_TIMEOUT_S = 60.0  # agent.tool_timeout_s: (0, 60]
_SCHEMA_KEYS = ("type", "description", "enum")


class ToolArgs(BaseModel):
    """Base class of a tool's arguments (what the model sends): unknown keys and coercions are errors."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class ToolParams(BaseModel):
    """Base class of a tool's params (the job's `agent.tools[i].params`): unknown keys are errors.

    `preflight` is what the job's preflight asks of the tool before a run starts: (field, reason) problems, the
    field relative to the params ("" for the tool itself). `on_worker` is False where the checking host is not the
    one the run will use (the API), so host facts (the sandbox) are left to the worker."""

    model_config = ConfigDict(extra="forbid", strict=True, validate_default=True, allow_inf_nan=False)

    def preflight(self, *, on_worker: bool) -> list[tuple[str, str]]:
        return []


class NoParams(ToolParams):
    """A tool without settings."""


@dataclass(frozen=True)
class ToolResult:
    """What a call gives the model back: `text` (its next message's content), whether it worked, and how long the
    call took (`call_tool` measures it; a tool's own value is replaced)."""

    text: str
    ok: bool
    latency_s: float = 0.0


ToolRun = Callable[..., ToolResult]  # run(args: ToolArgs, *, timeout_s: float) -> ToolResult


@dataclass(frozen=True)
class ToolDefinition:
    name: str
    args_model: type[ToolArgs]
    params_model: type[ToolParams]
    factory: Callable[[Any], ToolRun]
    description: str
    parameters: dict[str, Any]  # the flattened JSON schema of args_model


TOOLS: dict[str, ToolDefinition] = {}


def _flat_parameters(name: str, args_model: type[ToolArgs]) -> dict[str, Any]:
    """args_model's JSON schema as verl's OpenAIFunctionParametersSchema holds it: each property is {type,
    description, enum}; an optional property's type is the list of its types. A property it cannot express
    (a nested object, a reference) is refused at registration, so every schema a model sees is the one checked."""
    schema = args_model.model_json_schema()
    properties: dict[str, Any] = {}
    for field, prop in schema.get("properties", {}).items():
        flat = {k: prop[k] for k in _SCHEMA_KEYS if k in prop}
        if "anyOf" in prop and "type" not in prop:
            types = [option.get("type") for option in prop["anyOf"]]
            if all(isinstance(t, str) for t in types):
                flat["type"] = types
        if "type" not in flat or "$ref" in prop or flat["type"] == "object":
            raise TypeError(f"tool {name!r}: argument {field!r} is not a flat JSON type (string, number, ...)")
        properties[field] = flat
    return {"type": "object", "properties": properties, "required": list(schema.get("required", []))}


def register_tool(
    name: str, args_model: type[ToolArgs], params_model: type[ToolParams], description: str
) -> Callable[[Callable[[Any], ToolRun]], Callable[[Any], ToolRun]]:
    """Decorator registering a tool factory `factory(params) -> run` under `name`."""
    if not isinstance(args_model, type) or not issubclass(args_model, ToolArgs):
        raise TypeError(f"tool {name!r}: args_model must subclass ToolArgs, got {args_model!r}")
    if not isinstance(params_model, type) or not issubclass(params_model, ToolParams):
        raise TypeError(f"tool {name!r}: params_model must subclass ToolParams, got {params_model!r}")
    parameters = _flat_parameters(name, args_model)

    def decorator(factory: Callable[[Any], ToolRun]) -> Callable[[Any], ToolRun]:
        if name in TOOLS:
            raise ValueError(f"tool {name!r} is already registered")
        TOOLS[name] = ToolDefinition(name, args_model, params_model, factory, description, parameters)
        return factory

    return decorator


def tool_names() -> list[str]:
    """The registered tools, sorted."""
    return sorted(TOOLS)


def get_tool(name: str) -> ToolDefinition:
    try:
        return TOOLS[name]
    except KeyError:
        raise KeyError(f"unknown tool {name!r}; known tools: {', '.join(tool_names()) or '(none)'}") from None


def _params(definition: ToolDefinition, params: Mapping[str, Any] | ToolParams | None) -> ToolParams:
    if isinstance(params, definition.params_model):
        return params
    if isinstance(params, ToolParams):
        params = params.model_dump()
    return definition.params_model.model_validate(dict(params or {}))


def tool_schema(name: str, params: Mapping[str, Any] | ToolParams | None = None) -> dict[str, Any]:
    """The OpenAI function schema `{"type": "function", "function": {name, description, parameters}}` of a tool
    (pydantic ValidationError when `params` are not the tool's). A tool whose params have a `description` (set by
    the job) is described by it."""
    definition = get_tool(name)
    validated = _params(definition, params)
    description = getattr(validated, "description", None) or definition.description
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": json.loads(json.dumps(definition.parameters)),
        },
    }


def truncate(text: str, limit: int = MAX_RESULT_CHARS) -> str:
    """`text` cut to `limit` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    note = f"\n[truncated: {len(text) - limit} more characters]"
    return text[: max(0, limit - len(note))] + note


def _error_text(exc: ValidationError) -> str:
    problems = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        problems.append(f"{where}: {err['msg']}")
    return "; ".join(problems)


class Tool:
    """A built tool: its definition, the job's validated params and the run its factory returned."""

    def __init__(self, definition: ToolDefinition, params: ToolParams):
        self.definition = definition
        self.params = params
        self._run = definition.factory(params)

    @property
    def name(self) -> str:
        return self.definition.name

    def schema(self) -> dict[str, Any]:
        return tool_schema(self.name, self.params)

    def __call__(self, raw_args: str | Mapping[str, Any], *, timeout_s: float) -> ToolResult:
        if not 0 < timeout_s <= MAX_TIMEOUT_S:
            raise ValueError(f"timeout_s must be in (0, {MAX_TIMEOUT_S:g}], got {timeout_s!r}")
        start = time.perf_counter()
        result = self._call(raw_args, timeout_s)
        return ToolResult(truncate(result.text), result.ok, round(time.perf_counter() - start, 6))

    def _call(self, raw_args: str | Mapping[str, Any], timeout_s: float) -> ToolResult:
        name = self.name
        try:
            if isinstance(raw_args, str):
                if len(raw_args) > MAX_ARGS_CHARS:
                    return ToolResult(f"error: {name}: the arguments are over {MAX_ARGS_CHARS} characters", False)
                args = self.definition.args_model.model_validate_json(raw_args or "{}")
            elif isinstance(raw_args, Mapping):
                if len(json.dumps(raw_args, default=str)) > MAX_ARGS_CHARS:
                    return ToolResult(f"error: {name}: the arguments are over {MAX_ARGS_CHARS} characters", False)
                args = self.definition.args_model.model_validate(dict(raw_args))
            else:
                return ToolResult(f"error: {name}: the arguments must be a JSON object", False)
        except ValidationError as exc:
            return ToolResult(f"error: {name}: invalid arguments: {_error_text(exc)}", False)
        except (ValueError, TypeError, RecursionError) as exc:
            return ToolResult(f"error: {name}: the arguments are not a JSON object ({type(exc).__name__})", False)
        try:
            return self._run(args, timeout_s=timeout_s)
        except Exception as exc:  # noqa: BLE001 - a failing tool is the episode's tool error, never the run's crash
            return ToolResult(f"error: {name} failed: {type(exc).__name__}: {str(exc)[:300]}", False)


def build_tool(name: str, params: Mapping[str, Any] | ToolParams | None = None) -> Tool:
    """The tool `name` with the job's `params` (KeyError for an unknown tool, pydantic ValidationError for params
    that are not its own: both are refused by the config rules before a run)."""
    definition = get_tool(name)
    return Tool(definition, _params(definition, params))


def call_tool(
    name: str, params: Mapping[str, Any] | ToolParams | None, raw_args: str | Mapping[str, Any], timeout_s: float
) -> ToolResult:
    """One call of tool `name` with the model's `raw_args`; an unknown tool is an `ok=False` result too (the model
    may name anything). See the module's docstring."""
    if name not in TOOLS:
        return ToolResult(f"error: unknown tool {name!r}; the tools are: {', '.join(tool_names())}"[:1000], False)
    return build_tool(name, params)(raw_args, timeout_s=timeout_s)


# Populate the registry. Imported last: these modules import the names defined above.
from training_platform.training.tools import calculator, http_endpoint, python  # noqa: E402, F401, I001

"""The tool-calling parts of the OpenAI-compatible chat route (api/routes/openai_compat.py): the `tools` and
`tool_calls` request shapes with their bounds, and the reply's `tool_calls`, parsed from the model's hermes text
(`data/tool_calls.py`, the format training uses)."""

from __future__ import annotations

import json
import secrets
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StringConstraints, field_validator, model_validator

from training_platform.api import schemas
from training_platform.api.routes.playground import MAX_CONTENT_CHARS
from training_platform.data import tool_calls

MAX_TOOLS = 32
MAX_TOOL_JSON = 16 * 1024  # one tool's schema, as JSON
MAX_TOOLS_JSON = 64 * 1024  # all of them
MAX_CALLS_PER_MESSAGE = 16
ToolName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,64}$")]


class FunctionCallIn(schemas.RequestBody):
    name: ToolName
    arguments: Annotated[str, StringConstraints(max_length=MAX_CONTENT_CHARS)] = Field(
        description="The arguments as a JSON object, serialized (as OpenAI returns them)."
    )

    @field_validator("arguments")
    @classmethod
    def _json_object(cls, value: str) -> str:
        try:
            parsed = json.loads(value)
        except ValueError:
            raise ValueError("must be a JSON object serialized as a string, e.g. '{\"x\": 1}'") from None
        if not isinstance(parsed, dict):
            raise ValueError(f"must be a JSON object, got a JSON {type(parsed).__name__}")
        return value


class ToolCallIn(schemas.RequestBody):
    id: Annotated[str, StringConstraints(min_length=1, max_length=128)]
    type: Literal["function"]
    function: FunctionCallIn


class FunctionDef(schemas.RequestBody):
    name: ToolName
    description: Annotated[str, StringConstraints(max_length=4096)] | None = None
    parameters: dict[str, Any] | None = Field(None, description="A JSON Schema object: {type: object, properties}.")
    strict: bool | None = None  # accepted; arguments are not constrained while decoding

    @field_validator("parameters")
    @classmethod
    def _object_schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return value
        if value.get("type", "object") != "object":
            raise ValueError(f"must be a JSON Schema of an object (type: object), got type {value.get('type')!r}")
        properties = value.get("properties", {})
        if not isinstance(properties, dict) or not all(isinstance(v, dict) for v in properties.values()):
            raise ValueError("properties must map each argument name to its JSON Schema (an object)")
        required = value.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise ValueError("required must be a list of argument names")
        return value


class ToolDef(schemas.RequestBody):
    type: Literal["function"]
    function: FunctionDef

    @model_validator(mode="after")
    def _bounded(self):
        size = len(json.dumps(self.schema_dict(), ensure_ascii=False))
        if size > MAX_TOOL_JSON:
            raise ValueError(f"the tool's schema is {size} characters of JSON; at most {MAX_TOOL_JSON}")
        return self

    def schema_dict(self) -> dict[str, Any]:
        """The OpenAI function schema as sent (fields the client left out stay out), for the chat template."""
        function: dict[str, Any] = {"name": self.function.name}
        if self.function.description is not None:
            function["description"] = self.function.description
        if self.function.parameters is not None:
            function["parameters"] = self.function.parameters
        return {"type": "function", "function": function}


class FunctionCallOut(BaseModel):
    name: str
    arguments: str


class ToolCallOut(BaseModel):
    id: str
    type: Literal["function"]
    function: FunctionCallOut


def reply_choice(index: int, text: str, finish_reason: str, *, parse_calls: bool) -> dict[str, Any]:
    """One choice of the answer. With tools offered (`parse_calls`), the hermes calls in `text` become
    `message.tool_calls` (arguments as JSON strings, written as training's template writes them), `content` the text
    around them (null when none is left) and `finish_reason` "tool_calls"; text without a well-formed call is
    returned as written."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if parse_calls:
        content, calls, _malformed = tool_calls.parse(text)
        if calls:
            message = {
                "role": "assistant",
                "content": content or None,
                "tool_calls": [
                    {
                        "id": f"call_{secrets.token_hex(12)}",
                        "type": "function",
                        "function": {
                            "name": call["name"],
                            "arguments": json.dumps(call["arguments"], ensure_ascii=False),
                        },
                    }
                    for call in calls
                ],
            }
            finish_reason = "tool_calls"
    return {"index": index, "message": message, "finish_reason": finish_reason, "logprobs": None}

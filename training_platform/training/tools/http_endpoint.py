"""`http_endpoint`: ask a model behind an operator-named OpenAI-compatible endpoint (one chat completion).

- `endpoint` is the NAME of an endpoint the operator defined (TP_ENDPOINTS / TP_ENDPOINTS_FILE, read at each call,
  as the llm_judge reward reads them); never a URL, and the model cannot choose it: the job sets it. `model` must be
  one the endpoint serves (when it lists them).
- The request goes through `core.endpoints.keyed_client`: the endpoint's key (from the variable it names) in the
  Authorization header, redirects never followed, nothing sent to another scheme/host/port than the endpoint's.
- One POST `/chat/completions` with the model's `query` (and the job's `system` prompt), the call's `timeout_s` as
  the HTTP timeout, at most `MAX_RESPONSE_BYTES` of reply read; the reply's message content, cut to
  `max_output_chars`, is the result. Errors (unknown endpoint, refused, timed out, HTTP status, a reply without
  content) are the result's text with `ok=False`; they name the endpoint and the model, never its URL or key.
"""

from __future__ import annotations

import json

from pydantic import Field, field_validator

from training_platform.training.tools import ToolArgs, ToolParams, ToolResult, ToolRun, register_tool, truncate

MAX_RESPONSE_BYTES = 1 << 20


class _ReplyTooLarge(Exception):
    pass


class HttpEndpointArgs(ToolArgs):
    query: str = Field(min_length=1, max_length=4000, description="The question or request for the endpoint's model")


class HttpEndpointParams(ToolParams):
    endpoint: str = Field(
        max_length=64,
        description="The NAME of an endpoint the operator defined (TP_ENDPOINTS; GET /api/v1/endpoints lists them), "
        "never a URL.",
    )
    model: str = Field(min_length=1, max_length=256, description="The model, as the endpoint names it.")
    description: str | None = Field(
        None,
        min_length=1,
        max_length=500,
        description="What the tool does, as the model is told in the tool list (default: a generic description).",
    )
    system: str | None = Field(None, max_length=4000, description="A system prompt sent before the model's query.")
    max_tokens: int = Field(256, ge=1, le=4096)
    temperature: float = Field(0.0, ge=0, le=2)
    max_output_chars: int = Field(2000, ge=64, le=64 * 1024, description="The reply is cut to this many characters.")

    @field_validator("endpoint")
    @classmethod
    def _endpoint_name(cls, value: str) -> str:
        from training_platform.core.endpoints import endpoint_reference

        return endpoint_reference(value)

    def preflight(self, *, on_worker: bool) -> list[tuple[str, str]]:
        """The endpoint is defined (TP_ENDPOINTS / TP_ENDPOINTS_FILE) and serves the model; nothing is sent."""
        from training_platform.core.endpoints import EndpointError

        try:
            resolve(self)
        except EndpointError as exc:
            return [(exc.field or "endpoint", str(exc))]
        return []


def resolve(params: HttpEndpointParams):
    """The operator's endpoint these params name (EndpointError: unknown, or it does not serve the model)."""
    from training_platform.core.endpoints import Endpoints
    from training_platform.core.settings import current_settings

    return Endpoints.from_env(current_settings()).resolve(
        params.endpoint, params.model, field="endpoint", model_field="model"
    )


def _read_capped(response) -> bytes:
    data = bytearray()
    for chunk in response.iter_bytes():
        data += chunk
        if len(data) > MAX_RESPONSE_BYTES:
            raise _ReplyTooLarge
    return bytes(data)


@register_tool(
    "http_endpoint",
    HttpEndpointArgs,
    HttpEndpointParams,
    "Ask another model a question and get its answer.",
)
def build_http_endpoint(params: HttpEndpointParams) -> ToolRun:
    def run(args: HttpEndpointArgs, *, timeout_s: float) -> ToolResult:
        import httpx

        from training_platform.core.endpoints import EndpointError, keyed_client

        what = f"endpoint {params.endpoint!r} (model {params.model!r})"
        try:
            endpoint = resolve(params)
        except EndpointError as exc:
            return ToolResult(f"error: {exc}", False)
        messages = [{"role": "system", "content": params.system}] if params.system else []
        messages.append({"role": "user", "content": args.query})
        payload = {
            "model": params.model,
            "messages": messages,
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
        }
        try:
            with (
                keyed_client(endpoint, timeout=timeout_s) as client,
                client.stream("POST", "/chat/completions", json=payload) as response,
            ):
                if response.status_code != 200:
                    return ToolResult(f"error: {what} answered HTTP {response.status_code}", False)
                body = json.loads(_read_capped(response))
        except EndpointError as exc:  # OutboundRefused
            return ToolResult(f"error: {exc}", False)
        except _ReplyTooLarge:
            return ToolResult(f"error: {what} sent a reply over {MAX_RESPONSE_BYTES} bytes", False)
        except httpx.TimeoutException:
            return ToolResult(f"error: {what} did not answer within {timeout_s:g}s", False)
        except httpx.HTTPError as exc:
            return ToolResult(f"error: the request to {what} failed ({type(exc).__name__})", False)
        except ValueError as exc:
            return ToolResult(f"error: {what} sent a reply that is not JSON ({type(exc).__name__})", False)
        try:
            content = body["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            content = None
        if not isinstance(content, str):
            return ToolResult(f"error: {what} sent a reply without a message", False)
        return ToolResult(truncate(content, params.max_output_chars), True)

    return run

"""An OpenAI-compatible endpoint over the platform's own models: `/api/v1/openai/v1` as an OpenAI `base_url`.

    POST /api/v1/openai/v1/chat/completions   {"model": "job-3/final", "messages": [...], "max_tokens": 64,
                                               "temperature": 0, "seed": 1, "stream": false}
    GET  /api/v1/openai/v1/models             the models you may use: job-N/final, job-N/step_NNNNNN, registered
    POST /api/v1/openai/v1/pooling            {"model": "demo-reward", "input": "2+3=5" | ["2+3=5", "2+3=7"]}
                                              -> vLLM's /pooling answer: data[i].data = [score] for a reward model

Model names: `job-N/final`, `job-N/step_000100` (a recorded checkpoint still on disk) or a registered model's name.
Authenticated like the rest of the API (`Authorization: Bearer <token>`: an OpenAI client's api_key), so an
operator can name this URL as an endpoint (TP_ENDPOINTS) and evaluations and judge rewards use the platform's own
models. Requests and answers follow OpenAI's chat completions (`stream: true` sends `data: {chunk}` lines and
`data: [DONE]`; `stream_options.include_usage` adds a last chunk with the usage); errors keep the platform's
`{"detail": ...}` shape. The same resolution, bounds and inference workers as the playground
(`api/routes/playground.py`).

Supported: model, messages (system/developer/user/assistant with string content), max_tokens /
max_completion_tokens (<= 1024, default 256), temperature [0, 2], top_p (0, 1], n (<= 16), stop (<= 4 strings),
seed, stream, stream_options, user (ignored); presence/frequency penalties only at 0, logprobs only false. Anything
else is a 422 naming the field.

Tools (the hermes format training uses, `data/tool_calls.py`):
- `tools`: 1..32 `{"type": "function", "function": {"name", "description", "parameters"}}`, names unique and
  `[A-Za-z0-9_-]{1,64}`, `parameters` a JSON Schema object (`type: object`), each tool <= 16 KiB of JSON, all
  <= 64 KiB. They reach the model's chat template as `apply_chat_template(..., tools=)`, the rendering training
  uses. A model whose template does not show them (no template, a rendering unchanged by `tools`, or one missing a
  tool's name) is a 422 on `tools`, rather than a model answering blind.
- `tool_choice`: "auto" (the default) or "none" (tools not shown, the reply not parsed for calls). "required" and a
  named function are a 422 on `tool_choice`: forcing a call needs constrained decoding, which the platform lacks.
  `parallel_tool_calls` may only be true (every call the model wrote is returned).
- Messages may be an assistant turn with `tool_calls` (`{id, type: "function", function: {name, arguments}}`,
  arguments a JSON object as a string; content then may be null) and `{"role": "tool", "tool_call_id", "content"}`.
  The arguments are parsed and handed to the template as objects, so a call sent back renders to the same hermes
  text as in training, whatever the client's JSON spacing.
- The reply is parsed (`tool_calls.parse`): when it holds calls, `message.tool_calls` lists them
  (`{id: "call_<hex>", type: "function", function: {name, arguments: <JSON string>}}`), `content` is the remaining
  text or null, and `finish_reason` is "tool_calls". A reply with only malformed blocks is returned as plain text.
- `stream: true` with tools offered is a 422 on `stream` for now (calls are parsed from the whole reply).

Pooling (`POST /pooling`, a reward model's scores) is in api/routes/openai_pooling.py.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query, status
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field, StringConstraints, field_validator, model_validator
from sqlmodel import Session, col, select
from starlette.concurrency import run_in_threadpool

from training_platform.api import inference_client, schemas
from training_platform.api.deps import CurrentUser, JsonBody, SessionDep
from training_platform.api.errors import ValidationFailed
from training_platform.api.routes.openai_tools import (
    MAX_CALLS_PER_MESSAGE,
    MAX_TOOLS,
    MAX_TOOLS_JSON,
    ToolCallIn,
    ToolCallOut,
    ToolDef,
    reply_choice,
)
from training_platform.api.routes.playground import (
    GENERATION_RESPONSES,
    MAX_MESSAGES,
    MAX_NEW_TOKENS,
    MAX_TOTAL_CHARS,
    STEP_NAME,
    Content,
    ResolvedModel,
    Seed,
    Temperature,
    TopP,
    resolve_job_model,
    resolve_registered,
    usage_of,
)
from training_platform.core.settings import get_settings
from training_platform.db.models import Checkpoint, Job, RegisteredModel, User, row_id
from training_platform.services.access import model_visible_clause, visible_model_by_name

router = APIRouter(prefix="/openai/v1", tags=["openai"])

JOB_MODEL = re.compile(r"^job-(\d{1,10})/(final|step_\d{1,10})$")
MAX_CHOICES = 16  # choices are generated one after another (bounded by TP_INFERENCE_TIMEOUT)
DEFAULT_MAX_TOKENS = 256


class OpenAIMessage(schemas.RequestBody):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Content | None = None
    name: Annotated[str, StringConstraints(max_length=64)] | None = None  # accepted, not used
    tool_calls: list[ToolCallIn] | None = Field(None, max_length=MAX_CALLS_PER_MESSAGE)
    tool_call_id: Annotated[str, StringConstraints(min_length=1, max_length=128)] | None = None

    @model_validator(mode="after")
    def _role_fields(self):
        if self.tool_calls and self.role != "assistant":
            raise ValueError(f"only an assistant message has tool_calls, not a {self.role!r} one")
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError("content is required (it may be null only on an assistant message with tool_calls)")
        if self.role == "tool" and self.tool_call_id is None:
            raise ValueError("a tool message needs the tool_call_id of the call it answers")
        if self.role != "tool" and self.tool_call_id is not None:
            raise ValueError(f"only a tool message has a tool_call_id, not a {self.role!r} one")
        return self

    def chars(self) -> int:
        return len(self.content or "") + sum(len(c.function.arguments) for c in self.tool_calls or ())

    def for_template(self) -> dict[str, Any]:
        """The message as the chat template gets it: a call's arguments parsed to an object, so the template's
        `tojson` writes them exactly as training does."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.function.name, "arguments": json.loads(c.function.arguments)},
                }
                for c in self.tool_calls
            ]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out


class StreamOptions(schemas.RequestBody):
    include_usage: bool = False


Stop = Annotated[str, StringConstraints(min_length=1, max_length=64)]


class ChatCompletionRequest(schemas.RequestBody):
    model: Annotated[str, StringConstraints(min_length=1, max_length=256)] = Field(
        description='"job-N/final", "job-N/step_000100" or a registered model\'s name (GET /openai/v1/models).'
    )
    messages: list[OpenAIMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    max_tokens: int | None = Field(None, ge=1, le=MAX_NEW_TOKENS, strict=True)
    max_completion_tokens: int | None = Field(None, ge=1, le=MAX_NEW_TOKENS, strict=True)
    temperature: Temperature = 1.0
    top_p: TopP = 1.0
    n: int = Field(1, ge=1, le=MAX_CHOICES, strict=True)
    stop: Stop | list[Stop] | None = None
    seed: Seed | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    logprobs: bool | None = None
    user: Annotated[str, StringConstraints(max_length=256)] | None = None
    tools: list[ToolDef] | None = Field(None, min_length=1, max_length=MAX_TOOLS)
    tool_choice: str | dict[str, Any] | None = Field(None, description='"auto" (the default) or "none".')
    parallel_tool_calls: bool | None = None

    @field_validator("messages")
    @classmethod
    def _total(cls, value: list[OpenAIMessage]) -> list[OpenAIMessage]:
        total = sum(m.chars() for m in value)
        if total > MAX_TOTAL_CHARS:
            raise ValueError(f"the messages hold {total} characters in all; at most {MAX_TOTAL_CHARS}")
        return value

    @field_validator("tools")
    @classmethod
    def _tools(cls, value: list[ToolDef] | None) -> list[ToolDef] | None:
        if not value:
            return value
        names = [t.function.name for t in value]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"tool names must be unique; repeated: {', '.join(twice)}")
        size = sum(len(json.dumps(t.schema_dict(), ensure_ascii=False)) for t in value)
        if size > MAX_TOOLS_JSON:
            raise ValueError(f"the tools are {size} characters of JSON in all; at most {MAX_TOOLS_JSON}")
        return value

    @field_validator("tool_choice")
    @classmethod
    def _auto_or_none(cls, value):
        if value is None or value in ("auto", "none"):
            return value
        if value == "required" or isinstance(value, dict):
            forced = "required" if value == "required" else "a named function"
            raise ValueError(
                f"{forced} is not supported: forcing a tool call needs constrained decoding, which this server "
                'does not do; use "auto" (the model decides) or "none"'
            )
        raise ValueError(f'must be "auto" or "none", got {value!r}')

    @field_validator("parallel_tool_calls")
    @classmethod
    def _parallel(cls, value):
        if value is False:
            raise ValueError("not supported: only true (every call the model writes is returned)")
        return value

    def offered_tools(self) -> list[dict[str, Any]] | None:
        """The tools shown to the model (none with tool_choice "none")."""
        if not self.tools or self.tool_choice == "none":
            return None
        return [t.schema_dict() for t in self.tools]

    @field_validator("stop")
    @classmethod
    def _few_stops(cls, value):
        if isinstance(value, list) and len(value) > 4:
            raise ValueError(f"at most 4 stop sequences, got {len(value)}")
        return value

    @field_validator("presence_penalty", "frequency_penalty")
    @classmethod
    def _no_penalty(cls, value):
        if value not in (None, 0, 0.0):
            raise ValueError("not supported: only 0")
        return value

    @field_validator("logprobs")
    @classmethod
    def _no_logprobs(cls, value):
        if value:
            raise ValueError("not supported: only false")
        return value


class ChatMessageOut(BaseModel):
    role: Literal["assistant"]
    content: str | None
    tool_calls: list[ToolCallOut] | None = None


class ChatChoice(BaseModel):
    index: int
    message: ChatMessageOut
    finish_reason: str
    logprobs: None = None


class CompletionUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: CompletionUsage
    system_fingerprint: str | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[ModelCard]


# ---------------------------------------------------------------------------------------------- resolution


def resolve_name(session: Session, user: User, name: str) -> ResolvedModel:
    settings = get_settings()
    try:
        match = JOB_MODEL.match(name)
        if match is not None:
            return resolve_job_model(session, user, settings, int(match.group(1)), match.group(2))
        return resolve_registered(
            session, user, settings, visible_model_by_name(session, user, name), f"model {name!r}"
        )
    finally:
        session.close()  # no database connection held while the model generates


# ---------------------------------------------------------------------------------------------- chat completions


def _chunk(
    completion_id: str, created: int, model: str, choices: list[dict[str, Any]], usage: dict[str, int] | None = None
) -> str:
    body: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "system_fingerprint": None,
        "choices": choices,
    }
    if usage is not None:
        body["usage"] = usage
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"


def _error_line(message: str, kind: str, code: int) -> str:
    """A failure after the stream started (OpenAI's error object as a data line; no [DONE] follows)."""
    return f"data: {json.dumps({'error': {'message': message, 'type': kind, 'code': code}})}\n\n"


async def _stream(pending: inference_client.Pending, model: str, include_usage: bool) -> AsyncIterator[str]:
    completion_id, created = f"chatcmpl-{pending.request_id}", int(time.time())
    started: set[int] = set()
    try:
        async for event in pending.events():
            if event["type"] == "token":
                index = int(event.get("index", 0))
                if index not in started:
                    started.add(index)
                    yield _chunk(
                        completion_id,
                        created,
                        model,
                        [
                            {
                                "index": index,
                                "delta": {"role": "assistant", "content": ""},
                                "logprobs": None,
                                "finish_reason": None,
                            }
                        ],
                    )
                yield _chunk(
                    completion_id,
                    created,
                    model,
                    [{"index": index, "delta": {"content": event["text"]}, "logprobs": None, "finish_reason": None}],
                )
                continue
            for choice in event.get("choices", []):
                index = int(choice["index"])
                delta = {} if index in started else {"role": "assistant", "content": ""}
                yield _chunk(
                    completion_id,
                    created,
                    model,
                    [{"index": index, "delta": delta, "logprobs": None, "finish_reason": choice["finish_reason"]}],
                )
            if include_usage:
                yield _chunk(completion_id, created, model, [], usage=usage_of(event))
        yield "data: [DONE]\n\n"
    except inference_client.GenerationTimeout as exc:
        yield _error_line(str(exc), "timeout", 504)
    except HTTPException as exc:
        yield _error_line(str(exc.detail), "error", exc.status_code)
    finally:
        await pending.close()


@router.post(
    "/chat/completions",
    response_model=ChatCompletion,
    dependencies=[JsonBody],
    responses={404: {"model": schemas.ErrorOut, "description": "No such model, or not yours"}, **GENERATION_RESPONSES},
)
async def chat_completions(body: ChatCompletionRequest, session: SessionDep, user: CurrentUser):
    """OpenAI's chat completions on the platform's models (job-N/final, job-N/step_NNNNNN, registered names)."""
    tools = body.offered_tools()
    if tools and body.stream:
        raise ValidationFailed(
            [
                (
                    "stream",
                    "stream: true with tools is not supported yet (tool calls are parsed from the whole reply); "
                    'send stream: false, or tool_choice: "none"',
                )
            ]
        )
    resolved = await run_in_threadpool(resolve_name, session, user, body.model)
    stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
    max_tokens = body.max_completion_tokens or body.max_tokens or DEFAULT_MAX_TOKENS
    seed = body.seed if body.seed is not None else secrets.randbelow(2**31)
    request = inference_client.InferenceRequest(
        path=resolved.path,
        label=resolved.label,
        messages=[m.for_template() for m in body.messages],
        max_new_tokens=max_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        seed=seed,
        n=body.n,
        stop=stop,
        tools=tools,
    )
    pending = await inference_client.start(request, row_id(user))
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return StreamingResponse(
            _stream(pending, body.model, include_usage),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    try:
        done = await pending.result()
    except inference_client.GenerationTimeout as exc:
        raise HTTPException(status.HTTP_504_GATEWAY_TIMEOUT, detail=str(exc)) from None
    finally:
        await pending.close()
    return {
        "id": f"chatcmpl-{pending.request_id}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.model,
        "system_fingerprint": None,
        "usage": usage_of(done),
        "choices": [
            reply_choice(c["index"], c["text"], c["finish_reason"], parse_calls=tools is not None)
            for c in done.get("choices", [])
        ],
    }


# ---------------------------------------------------------------------------------------------- models


def _has_model(path: str | None) -> bool:
    from pathlib import Path

    if not path:
        return False
    try:
        return (Path(path) / "config.json").is_file()
    except OSError:
        return False


def _epoch(value) -> int:
    return int(schemas.as_utc(value).timestamp()) if value is not None else 0


@router.get("/models", response_model=ModelList)
def list_models(
    session: SessionDep,
    user: CurrentUser,
    limit: Annotated[int, Query(ge=1, le=1000, description="At most this many models.")] = 200,
):
    """The models you may use here: your jobs' final models and checkpoints (newest jobs first; an admin's: every
    job's), then the registered models you may see."""
    data: list[dict[str, Any]] = []
    owners: dict[int, str] = {}

    def owner_name(owner_id: int | None) -> str:
        if owner_id is None:
            return "platform"
        if owner_id not in owners:
            owner = session.get(User, owner_id)
            owners[owner_id] = owner.name if owner is not None else "unknown"
        return owners[owner_id]

    query = select(Job).where(Job.kind == "train", col(Job.run_dir).is_not(None))
    if not user.is_admin:
        query = query.where(Job.owner_id == user.id)
    jobs = session.exec(query.order_by(col(Job.id).desc()).limit(limit)).all()
    steps: dict[int, list[Checkpoint]] = {}
    if jobs:
        rows = session.exec(
            select(Checkpoint)
            .where(col(Checkpoint.job_id).in_([j.id for j in jobs]), Checkpoint.removed == False)  # noqa: E712
            .order_by(col(Checkpoint.job_id).desc(), col(Checkpoint.step).desc())
            .limit(limit)
        ).all()
        for row in rows:
            steps.setdefault(row.job_id, []).append(row)
    for job in jobs:
        owned_by = owner_name(job.owner_id)
        if len(data) < limit and _has_model(f"{job.run_dir}/final"):
            data.append(
                {
                    "id": f"job-{job.id}/final",
                    "object": "model",
                    "created": _epoch(job.finished_at or job.created_at),
                    "owned_by": owned_by,
                }
            )
        for row in steps.get(row_id(job), []):
            if len(data) < limit and STEP_NAME.match(f"step_{row.step}") and _has_model(row.path):
                data.append(
                    {
                        "id": f"job-{job.id}/step_{row.step:06d}",
                        "object": "model",
                        "created": _epoch(row.created_at),
                        "owned_by": owned_by,
                    }
                )
    if len(data) < limit:
        models_query = select(RegisteredModel)
        if not user.is_admin:
            models_query = models_query.where(model_visible_clause(user))
        for model in session.exec(models_query.order_by(col(RegisteredModel.name)).limit(limit - len(data))).all():
            architectures = (model.info or {}).get("architectures") or []
            if architectures and all("Classification" in str(a) for a in architectures):
                continue  # a reward model / classifier: nothing to generate with
            data.append(
                {
                    "id": model.name,
                    "object": "model",
                    "created": _epoch(model.created_at),
                    "owned_by": owner_name(model.owner_id),
                }
            )
    return {"object": "list", "data": data}

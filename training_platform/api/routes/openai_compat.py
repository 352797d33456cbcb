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

Pooling follows vLLM's `/pooling` (its PoolingResponse): `{"id": "pool-...", "object": "list", "created", "model",
"data": [{"index": i, "object": "pooling", "data": [float, ...]}], "usage": {"prompt_tokens", "total_tokens",
"completion_tokens": 0}}`, served by the inference workers for sequence-classification models only (a reward model:
`data` is its one score; a classifier: its logits). So a data job's reward scorer (`JudgeClient`, `mode: reward`,
`reward_path: /pooling`) can name this URL as its endpoint. Bounds: `input` a string or 1..64 strings, each <= 32,000
characters, 64,000 in all; `encoding_format` only "float"; `user` ignored.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query, status
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field, StringConstraints, field_validator
from sqlmodel import Session, col, select
from starlette.concurrency import run_in_threadpool

from training_platform.api import inference_client, schemas
from training_platform.api.deps import CurrentUser, JsonBody, SessionDep
from training_platform.api.routes.playground import (
    GENERATION_RESPONSES,
    MAX_CONTENT_CHARS,
    MAX_MESSAGES,
    MAX_NEW_TOKENS,
    MAX_TOTAL_CHARS,
    STEP_NAME,
    Content,
    ResolvedModel,
    Seed,
    Temperature,
    TopP,
    check_total_chars,
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
MAX_POOL_INPUTS = 64


class OpenAIMessage(schemas.RequestBody):
    role: Literal["system", "developer", "user", "assistant"]
    content: Content
    name: Annotated[str, StringConstraints(max_length=64)] | None = None  # accepted, not used


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

    _total = field_validator("messages")(check_total_chars)

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
    content: str


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
    resolved = await run_in_threadpool(resolve_name, session, user, body.model)
    stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
    max_tokens = body.max_completion_tokens or body.max_tokens or DEFAULT_MAX_TOKENS
    seed = body.seed if body.seed is not None else secrets.randbelow(2**31)
    request = inference_client.InferenceRequest(
        path=resolved.path,
        label=resolved.label,
        messages=[{"role": m.role, "content": m.content} for m in body.messages],
        max_new_tokens=max_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        seed=seed,
        n=body.n,
        stop=stop,
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
            {
                "index": c["index"],
                "message": {"role": "assistant", "content": c["text"]},
                "finish_reason": c["finish_reason"],
                "logprobs": None,
            }
            for c in done.get("choices", [])
        ],
    }


# ---------------------------------------------------------------------------------------------- pooling


PoolInput = Annotated[str, StringConstraints(max_length=MAX_CONTENT_CHARS)]


class PoolingRequest(schemas.RequestBody):
    model: Annotated[str, StringConstraints(min_length=1, max_length=256)] = Field(
        description='A sequence-classification model (a reward model): "job-N/final", "job-N/step_000100" or a '
        "registered model's name."
    )
    input: PoolInput | list[PoolInput] = Field(description="One text, or 1..64 texts, each scored as a whole.")
    encoding_format: Literal["float"] = "float"
    user: Annotated[str, StringConstraints(max_length=256)] | None = None

    @field_validator("input")
    @classmethod
    def _bounded(cls, value):
        texts = [value] if isinstance(value, str) else value
        if not texts or len(texts) > MAX_POOL_INPUTS:
            raise ValueError(f"1..{MAX_POOL_INPUTS} texts, got {len(texts)}")
        total = sum(len(t) for t in texts)
        if total > MAX_TOTAL_CHARS:
            raise ValueError(f"the inputs hold {total} characters in all; at most {MAX_TOTAL_CHARS}")
        return value


class PoolingData(BaseModel):
    index: int
    object: Literal["pooling"]
    data: list[float]


class PoolingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int
    completion_tokens: int = 0


class PoolingResponse(BaseModel):
    id: str
    object: Literal["list"]
    created: int
    model: str
    data: list[PoolingData]
    usage: PoolingUsage


@dataclass
class _PoolMessage(inference_client.InferenceRequest):
    """The inference message of a pooling request (`kind: pool`): the texts instead of messages and sampling."""

    inputs: list[str] = field(default_factory=list)

    def payload(self, timeout_s: float) -> dict[str, Any]:
        return {"kind": "pool", "path": self.path, "label": self.label, "inputs": self.inputs, "timeout_s": timeout_s}


@router.post(
    "/pooling",
    response_model=PoolingResponse,
    dependencies=[JsonBody],
    responses={404: {"model": schemas.ErrorOut, "description": "No such model, or not yours"}, **GENERATION_RESPONSES},
)
async def pooling(body: PoolingRequest, session: SessionDep, user: CurrentUser):
    """vLLM's /pooling on the platform's sequence-classification models: a reward model's score per input text."""
    resolved = await run_in_threadpool(resolve_name, session, user, body.model)
    texts = [body.input] if isinstance(body.input, str) else list(body.input)
    request = _PoolMessage(
        path=resolved.path,
        label=resolved.label,
        messages=[],
        max_new_tokens=1,
        temperature=0.0,
        top_p=1.0,
        seed=0,
        inputs=texts,
    )
    pending = await inference_client.start(request, row_id(user))
    try:
        done = await pending.result()
    except inference_client.GenerationTimeout as exc:
        raise HTTPException(status.HTTP_504_GATEWAY_TIMEOUT, detail=str(exc)) from None
    finally:
        await pending.close()
    if done.get("timed_out"):
        timeout_s = get_settings().inference_timeout_s
        raise HTTPException(
            status.HTTP_504_GATEWAY_TIMEOUT,
            detail=f"the scoring did not finish within TP_INFERENCE_TIMEOUT={timeout_s:g}s; it was stopped",
        )
    prompt_tokens = sum(int(n) for n in done.get("prompt_tokens", []))
    return {
        "id": f"pool-{pending.request_id}",
        "object": "list",
        "created": int(time.time()),
        "model": body.model,
        "data": [
            {"index": i, "object": "pooling", "data": [float(v) for v in values]}
            for i, values in enumerate(done.get("data", []))
        ],
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens, "completion_tokens": 0},
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

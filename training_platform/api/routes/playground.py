"""The playground: chat with a training job's final model or checkpoint, or with a registered model.

    POST /api/v1/playground/generate
    {"model": {"job_id": 3, "checkpoint": "step_000100" | "final"} | {"model_id": 2},
     "messages": [{"role": "user", "content": "2+3="}], "max_new_tokens": 64, "temperature": 0.7, "top_p": 0.95,
     "seed": 1, "stream": false}

Answers the completion as JSON, or with `"stream": true` as Server-Sent Events: `data: {"token": "..."}` per piece
of text, then `event: done` with `{"id", "model", "text", "finish_reason", "usage", "timings"}` (or `event: error`
with `{"status", "detail"}` when the generation fails or runs out of time after the stream started).

The model reference is resolved and authorized here (your job, or any job for an admin; a registered model you
may see; the checkpoint must be recorded, not rotated away and on disk: otherwise 404). Generation runs in the
inference workers (`workers/inference_tasks.py`, through `api/inference_client.py`): 503 when none runs or none
took the request within TP_INFERENCE_PICKUP_TIMEOUT, 504 past TP_INFERENCE_TIMEOUT, 429 past
TP_INFERENCE_MAX_INFLIGHT requests of yours in progress.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, status
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field, StringConstraints, field_validator, model_validator
from sqlmodel import Session, col, select
from starlette.concurrency import run_in_threadpool

from training_platform.api import inference_client, schemas
from training_platform.api.deps import CurrentUser, JsonBody, SessionDep, can_see
from training_platform.core.path_policy import check_path, resolve_path
from training_platform.core.settings import Settings, get_settings
from training_platform.db.models import Checkpoint, Job, RegisteredModel, User, row_id
from training_platform.services.access import model_visible, reader_for

router = APIRouter(prefix="/playground", tags=["playground"])

# Bounds of every generation request (the playground's and the OpenAI-compatible route's).
MAX_MESSAGES = 64
MAX_CONTENT_CHARS = 32_000
MAX_TOTAL_CHARS = 64_000
MAX_NEW_TOKENS = 1024
MAX_SEED = 2**31 - 1
STEP_NAME = re.compile(r"^step_(\d{1,10})$")
CHECKPOINT_PATTERN = r"^(final|step_\d{1,10})$"

Content = Annotated[str, StringConstraints(max_length=MAX_CONTENT_CHARS)]
Temperature = Annotated[float, Field(ge=0.0, le=2.0, description="0 = greedy; otherwise sampling.")]
TopP = Annotated[float, Field(gt=0.0, le=1.0, description="Nucleus sampling mass (no top-k).")]
Seed = Annotated[int, Field(ge=0, le=MAX_SEED, strict=True, description="Same seed, same model -> same text.")]


def check_total_chars(messages: list[Any]) -> list[Any]:
    total = sum(len(m.content) for m in messages)
    if total > MAX_TOTAL_CHARS:
        raise ValueError(f"the messages hold {total} characters in all; at most {MAX_TOTAL_CHARS}")
    return messages


# ---------------------------------------------------------------------------------------------- bodies


class ChatMessage(schemas.RequestBody):
    role: Literal["system", "user", "assistant"]
    content: Content


class ModelRef(schemas.RequestBody):
    """Either `job_id` (+ `checkpoint`, default "final") or `model_id` (a registered model)."""

    job_id: schemas.BodyId | None = None
    checkpoint: Annotated[str, StringConstraints(pattern=CHECKPOINT_PATTERN)] | None = Field(
        None, description='"final" (the default with job_id) or a checkpoint such as "step_000100".'
    )
    model_id: schemas.BodyId | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> ModelRef:
        if (self.job_id is None) == (self.model_id is None):
            raise ValueError("give either job_id (+ checkpoint) or model_id")
        if self.model_id is not None and self.checkpoint is not None:
            raise ValueError("checkpoint goes with job_id, not with model_id")
        return self


class PlaygroundRequest(schemas.RequestBody):
    model: ModelRef
    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    max_new_tokens: int = Field(128, ge=1, le=MAX_NEW_TOKENS, strict=True)
    temperature: Temperature = 0.7
    top_p: TopP = 1.0
    seed: Seed = 0
    stream: bool = Field(False, strict=True, description="Server-Sent Events: one event per piece of text.")

    _total = field_validator("messages")(check_total_chars)


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class PlaygroundReply(BaseModel):
    id: str
    model: str = Field(description='What answered: "job-3/final", "job-3/step_000100" or a registered model name.')
    text: str
    finish_reason: str = Field(description='"stop" (end of sequence) or "length" (max_new_tokens).')
    usage: Usage
    seed: int
    timings: dict[str, float | bool | None]


# ---------------------------------------------------------------------------------------------- resolution


@dataclass
class ResolvedModel:
    path: str
    label: str


def _missing(message: str) -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, detail=message)


def _is_model_dir(path: Path) -> bool:
    try:
        return path.is_dir() and (path / "config.json").is_file()
    except OSError:
        return False


def _readable(session: Session, user: User, settings: Settings, path: Path, label: str) -> str:
    """The directory, if the path policy lets this user read it (the same rule as job configs)."""
    if check_path("model", str(path), settings, reader_for(session, user)) is not None:
        raise _missing(f"model {label} not found")
    return str(resolve_path(str(path), settings))


def resolve_job_model(session: Session, user: User, settings: Settings, job_id: int, checkpoint: str) -> ResolvedModel:
    job = session.get(Job, job_id) if 0 < job_id <= schemas.DB_INT_MAX else None
    if job is None or not can_see(user, job):
        raise _missing(f"job {job_id} not found")
    if job.kind != "train":
        raise _missing(f"job {job_id} is a {job.kind} job: it has no model")
    if checkpoint == "final":
        label = f"job-{job.id}/final"
        final = Path(job.run_dir) / "final" if job.run_dir else None
        if final is None or not _is_model_dir(final):
            raise _missing(
                f"{label} not found: job {job.id} has no final model (status {job.status}); its "
                f"checkpoints are listed at /jobs/{job.id}/checkpoints"
            )
        return ResolvedModel(_readable(session, user, settings, final, label), label)
    match = STEP_NAME.match(checkpoint)
    if match is None:
        raise _missing(f"checkpoint {checkpoint!r} not found")
    step = int(match.group(1))
    label = f"job-{job.id}/step_{step:06d}"
    row = (
        session.exec(select(Checkpoint).where(Checkpoint.job_id == job.id, Checkpoint.step == step)).first()
        if step <= schemas.DB_INT_MAX
        else None
    )
    if row is None:
        steps = session.exec(
            select(Checkpoint.step)
            .where(Checkpoint.job_id == job.id, Checkpoint.removed == False)  # noqa: E712
            .order_by(col(Checkpoint.step).desc())
            .limit(10)
        ).all()
        available = ", ".join(f"step_{s:06d}" for s in sorted(steps)) or "none yet"
        raise _missing(f"{label} not found: job {job.id} recorded no checkpoint at step {step} (latest: {available})")
    if row.removed:
        raise _missing(f"{label} not found: rotated away (training.keep_last_checkpoints)")
    path = Path(row.path)
    if not _is_model_dir(path):
        raise _missing(f"{label} not found: the checkpoint directory is missing on disk")
    return ResolvedModel(_readable(session, user, settings, path, label), label)


def resolve_registered(
    session: Session, user: User, settings: Settings, model: RegisteredModel | None, what: str
) -> ResolvedModel:
    if model is None or not model_visible(user, model):
        raise _missing(f"{what} not found")
    path = resolve_path(model.path, settings)
    if not _is_model_dir(path):
        raise _missing(f"model {model.name!r}: its directory is missing or holds no config.json")
    return ResolvedModel(_readable(session, user, settings, path, model.name), model.name)


def resolve_reference(session: Session, user: User, ref: ModelRef) -> ResolvedModel:
    settings = get_settings()
    try:
        if ref.model_id is not None:
            model = session.get(RegisteredModel, ref.model_id)
            return resolve_registered(session, user, settings, model, f"model {ref.model_id}")
        assert ref.job_id is not None  # ModelRef's validator: exactly one of job_id and model_id
        return resolve_job_model(session, user, settings, ref.job_id, ref.checkpoint or "final")
    finally:
        session.close()  # no database connection held while the model generates


# ---------------------------------------------------------------------------------------------- the route


def sse(data: dict[str, Any], event: str | None = None) -> str:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data, ensure_ascii=False)}\n\n"


def usage_of(done: dict[str, Any]) -> dict[str, int]:
    prompt = int(done.get("prompt_tokens") or 0)
    completion = sum(int(c.get("completion_tokens") or 0) for c in done.get("choices", []))
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _reply(pending: inference_client.Pending, done: dict[str, Any], label: str, seed: int) -> dict[str, Any]:
    choice = (done.get("choices") or [{}])[0]
    return {
        "id": pending.request_id,
        "model": label,
        "text": choice.get("text", ""),
        "finish_reason": choice.get("finish_reason", "stop"),
        "usage": usage_of(done),
        "seed": seed,
        "timings": done.get("timings", {}),
    }


async def _stream(pending: inference_client.Pending, label: str, seed: int) -> AsyncIterator[str]:
    try:
        async for event in pending.events():
            if event["type"] == "token":
                yield sse({"token": event["text"]})
            else:
                yield sse({"done": True, **_reply(pending, event, label, seed)}, event="done")
    except inference_client.GenerationTimeout as exc:
        yield sse({"status": 504, "detail": str(exc)}, event="error")
    except HTTPException as exc:
        yield sse({"status": exc.status_code, "detail": exc.detail}, event="error")
    finally:
        await pending.close()


GENERATION_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "content": {"text/event-stream": {}},
        "description": 'The completion (JSON), or with `stream` Server-Sent Events: `data: {"token": ...}` '
        "per piece of text, then `event: done` with the reply's fields.",
    },
    429: {
        "model": schemas.ErrorOut,
        "description": "Too many of your generation requests in progress (TP_INFERENCE_MAX_INFLIGHT)",
    },
    500: {"model": schemas.ErrorOut, "description": "The inference worker could not load the model or generate"},
    503: {
        "model": schemas.ErrorOut,
        "description": "No inference worker runs, none took the request within "
        "TP_INFERENCE_PICKUP_TIMEOUT, or the broker is unreachable",
    },
    504: {"model": schemas.ErrorOut, "description": "The generation ran past TP_INFERENCE_TIMEOUT (it was stopped)"},
}


@router.post(
    "/generate",
    response_model=PlaygroundReply,
    dependencies=[JsonBody],
    responses={
        404: {"model": schemas.ErrorOut, "description": "No such job, checkpoint or model, or not yours"},
        **GENERATION_RESPONSES,
    },
)
async def generate(body: PlaygroundRequest, session: SessionDep, user: CurrentUser):
    """Generate a reply to `messages` with a job's final model or checkpoint, or a registered model."""
    resolved = await run_in_threadpool(resolve_reference, session, user, body.model)
    request = inference_client.InferenceRequest(
        path=resolved.path,
        label=resolved.label,
        messages=[m.model_dump() for m in body.messages],
        max_new_tokens=body.max_new_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        seed=body.seed,
    )
    pending = await inference_client.start(request, row_id(user))
    if body.stream:
        return StreamingResponse(
            _stream(pending, resolved.label, body.seed),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    try:
        done = await pending.result()
    except inference_client.GenerationTimeout as exc:
        raise HTTPException(status.HTTP_504_GATEWAY_TIMEOUT, detail=str(exc)) from None
    finally:
        await pending.close()
    return _reply(pending, done, resolved.label, body.seed)

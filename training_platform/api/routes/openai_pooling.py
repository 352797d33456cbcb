"""vLLM's `/pooling` under the OpenAI-compatible base URL: `POST /api/v1/openai/v1/pooling`
{"model": "demo-reward", "input": "2+3=5" | ["2+3=5", "2+3=7"]} -> data[i].data = [score] for a reward model.

Pooling follows vLLM's `/pooling` (its PoolingResponse): `{"id": "pool-...", "object": "list", "created", "model",
"data": [{"index": i, "object": "pooling", "data": [float, ...]}], "usage": {"prompt_tokens", "total_tokens",
"completion_tokens": 0}}`, served by the inference workers for sequence-classification models only (a reward model:
`data` is its one score; a classifier: its logits). So a data job's reward scorer (`JudgeClient`, `mode: reward`,
`reward_path: /pooling`) can name this URL as its endpoint. Bounds: `input` a string or 1..64 strings, each <= 32,000
characters, 64,000 in all; `encoding_format` only "float"; `user` ignored.
Models resolve as for chat completions (`openai_compat.resolve_name`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, status
from pydantic import BaseModel, Field, StringConstraints, field_validator
from starlette.concurrency import run_in_threadpool

from training_platform.api import inference_client, schemas
from training_platform.api.deps import CurrentUser, JsonBody, SessionDep
from training_platform.api.routes.openai_compat import resolve_name
from training_platform.api.routes.playground import GENERATION_RESPONSES, MAX_CONTENT_CHARS, MAX_TOTAL_CHARS
from training_platform.core.settings import get_settings
from training_platform.db.models import row_id

router = APIRouter(prefix="/openai/v1", tags=["openai"])

MAX_POOL_INPUTS = 64


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

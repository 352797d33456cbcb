"""A job's RL rollouts: the sample of each logging step's generations its run keeps in `rollouts.jsonl`
(training/rollouts.py), filtered and paged.

The file is streamed for every request (never loaded whole: it may hold up to `training.rollouts_max_mb`): the step
of a row is read from its prefix (`{"step": N, ...`, as the writer puts it first), a row is parsed only when a
reward or tool-error filter needs it or it falls on the page. A row still being written (no newline yet) is not
served. An agent episode's row also has its turns and tool counts (`tool_errors=true|false` filters on them).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from training_platform.api import schemas
from training_platform.api.deps import VisibleJob
from training_platform.api.errors import ValidationFailed
from training_platform.api.errors import responses as error_responses
from training_platform.training.rundir import RunDir

router = APIRouter(prefix="/jobs", tags=["rollouts"])

MAX_LIMIT = 500
MAX_LINE = 16 << 20  # a longer line is not a row our writer made: skipped
REWARD_BOUND = 1e12
_STEP_PREFIX = re.compile(rb'^\{"step": (\d+)[,}]')


class ToolCallRead(BaseModel):
    name: str
    arguments: Any = Field(description="The call's arguments (an object; the raw text when it was not JSON).")


class TurnRead(BaseModel):
    role: str = Field(description="`assistant` (the model's message) or `tool` (a tool's result).")
    content: str
    tool_calls: list[ToolCallRead] | None = Field(None, description="assistant: the calls it made.")
    name: str | None = Field(None, description="tool: which tool answered.")
    arguments: Any = Field(None, description="tool: the arguments it was called with.")
    ok: bool | None = Field(None, description="tool: whether the call succeeded.")
    latency_s: float | None = None
    reward: float | None = Field(None, description="tool: the per-call reward (agent.tool_call/error_reward).")


class RolloutRead(BaseModel):
    step: int
    prompt: str
    completion: str
    rewards: dict[str, float | None] = Field(
        description="Each reward function's value (null: it returned None); {} when the engine reports only the total."
    )
    reward: float | None = Field(description="The total reward the trainer optimised.")
    advantage: float | None = Field(
        description="The rollout's advantage when the trainer computes one per completion (GRPO, RLOO), else null."
    )
    turns: list[TurnRead] | None = Field(None, description="An agent episode's turns after the prompt; else null.")
    tool_calls: int | None = Field(None, description="An agent episode's tool calls; else null.")
    tool_errors: int | None = Field(None, description="How many of its tool calls failed; else null.")


class RolloutPage(schemas.Page[RolloutRead]):
    steps: list[int] = Field(description="Every step with kept rollouts (whatever the filters), ascending.")


def _lines(path: Path) -> Iterator[bytes]:
    """Complete lines of the file, each read with a bounded buffer."""
    try:
        f = path.open("rb")
    except (FileNotFoundError, NotADirectoryError):
        return
    with f:
        while True:
            line = f.readline(MAX_LINE)
            if not line:
                return
            if not line.endswith(b"\n"):
                if len(line) < MAX_LINE:
                    return  # the row being written now
                while line and not line.endswith(b"\n"):  # an over-long line: skip the rest of it
                    line = f.readline(MAX_LINE)
                continue
            if line.strip():
                yield line


def _row(line: bytes) -> dict | None:
    try:
        row = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return row if isinstance(row, dict) else None


def _number(value) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _turn(turn: dict) -> dict | None:
    if not isinstance(turn.get("role"), str):
        return None
    calls = turn.get("tool_calls")
    return {
        "role": turn["role"],
        "content": str(turn.get("content") or ""),
        "tool_calls": [
            {"name": str(c.get("name") or ""), "arguments": c.get("arguments")} for c in calls if isinstance(c, dict)
        ]
        if isinstance(calls, list)
        else None,
        "name": turn["name"] if isinstance(turn.get("name"), str) else None,
        "arguments": turn.get("arguments"),
        "ok": turn["ok"] if isinstance(turn.get("ok"), bool) else None,
        "latency_s": _number(turn.get("latency_s")),
        "reward": _number(turn.get("reward")),
    }


def _turns(value) -> list[dict] | None:
    if not isinstance(value, list):
        return None
    return [t for t in (_turn(x) for x in value if isinstance(x, dict)) if t is not None]


def read_rollouts(
    path: Path,
    *,
    step: int | None,
    min_reward: float | None,
    max_reward: float | None,
    limit: int,
    offset: int,
    tool_errors: bool | None = None,
) -> dict:
    items: list[dict] = []
    steps: set[int] = set()
    total = 0
    for line in _lines(path):
        match = _STEP_PREFIX.match(line)
        row = None
        if match is not None:
            row_step = int(match.group(1))
        else:
            row = _row(line)
            if row is None or not isinstance(row.get("step"), int):
                continue
            row_step = row["step"]
        steps.add(row_step)
        if step is not None and row_step != step:
            continue
        if min_reward is not None or max_reward is not None:
            row = row or _row(line)
            reward = _number(row.get("reward")) if row else None
            if reward is None:
                continue  # no total: outside any reward range
            if (min_reward is not None and reward < min_reward) or (max_reward is not None and reward > max_reward):
                continue
        if tool_errors is not None:
            row = row or _row(line)
            errors = _int(row.get("tool_errors")) if row else None
            if errors is None or (errors > 0) != tool_errors:
                continue  # not an agent episode: neither with nor without errors
        if offset <= total < offset + limit:
            row = row or _row(line)
            if row is None:
                continue
            raw_rewards = row.get("rewards")
            rewards = raw_rewards if isinstance(raw_rewards, dict) else {}
            items.append(
                {
                    "step": row_step,
                    "prompt": str(row.get("prompt") or ""),
                    "completion": str(row.get("completion") or ""),
                    "rewards": {str(k): _number(v) for k, v in rewards.items()},
                    "reward": _number(row.get("reward")),
                    "advantage": _number(row.get("advantage")),
                    "turns": _turns(row.get("turns")),
                    "tool_calls": _int(row.get("tool_calls")),
                    "tool_errors": _int(row.get("tool_errors")),
                }
            )
        total += 1
    return {"items": items, "total": total, "limit": limit, "offset": offset, "steps": sorted(steps)}


@router.get("/{job_id}/rollouts", response_model=RolloutPage, responses=error_responses(422))
def job_rollouts(
    job: VisibleJob,
    step: Annotated[int | None, Query(ge=0, le=schemas.DB_INT_MAX, description="Only this step.")] = None,
    min_reward: Annotated[
        float | None, Query(ge=-REWARD_BOUND, le=REWARD_BOUND, allow_inf_nan=False, description="Total reward >= this.")
    ] = None,
    max_reward: Annotated[
        float | None, Query(ge=-REWARD_BOUND, le=REWARD_BOUND, allow_inf_nan=False, description="Total reward <= this.")
    ] = None,
    tool_errors: Annotated[
        bool | None,
        Query(
            description="Agent episodes only: true, those with at least one failed tool call; false, those with none."
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 50,
    offset: schemas.Offset = 0,
):
    """The rollouts an RL job kept (a sample per logging step: prompt, completion, each reward function's value,
    the total, the advantage; an agent episode's turns and tool counts), in step order. A job that keeps none (not
    RL, not started) answers an empty page."""
    if min_reward is not None and max_reward is not None and min_reward > max_reward:
        raise ValidationFailed([("query.min_reward", f"{min_reward} is above max_reward {max_reward}")])
    if not job.run_dir:
        return {"items": [], "total": 0, "limit": limit, "offset": offset, "steps": []}
    return read_rollouts(
        RunDir(job.run_dir).rollouts_file,
        step=step,
        min_reward=min_reward,
        max_reward=max_reward,
        limit=limit,
        offset=offset,
        tool_errors=tool_errors,
    )

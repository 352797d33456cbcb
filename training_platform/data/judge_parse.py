"""How a judge's reply becomes a score, and what makes two judge calls the same call: shared by the data factory's
judge scoring (data/score.py `JudgeClient`) and the `llm_judge` reward (training/rewards/llm_judge.py). Light on
purpose (no numpy): the reward registry imports it during config validation."""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_REPLY_CHARS = 20_000  # what the parser reads of a judge's reply


class JudgeParse(BaseModel):
    """How a score is read from the judge's reply: `regex` (its group 1 if it has groups, else the whole match) or
    `json_field` (a dotted path into the reply parsed as JSON, or into the first {...} in it); neither: the first
    number of the reply."""

    model_config = ConfigDict(extra="forbid")

    regex: str | None = Field(None, min_length=1, max_length=500)
    json_field: str | None = Field(
        None, min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_\-]{1,64}(\.[A-Za-z0-9_\-]{1,64}){0,7}$"
    )

    @model_validator(mode="after")
    def _one_way(self) -> JudgeParse:
        if self.regex is not None and self.json_field is not None:
            raise ValueError("give `regex` or `json_field`, not both")
        if self.regex is not None:
            try:
                re.compile(self.regex)
            except re.error as exc:
                raise ValueError(f"regex: not a valid regular expression ({exc})") from None
        return self


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _first_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        match = _NUMBER.search(value)
        return float(match.group(0)) if match else None
    if isinstance(value, list):
        for item in value:
            number = _first_number(item)
            if number is not None:
                return number
    if isinstance(value, dict):
        for key in ("score", "reward", "data", "probs", "embedding"):
            if key in value:
                number = _first_number(value[key])
                if number is not None:
                    return number
    return None


def _json_field(content: str, path: str) -> Any:
    text = content.strip()
    try:
        data = json.loads(text)
    except ValueError:
        start, end = text.find("{"), text.rfind("}")
        if start < 0 or end <= start:
            return None
        try:
            data = json.loads(text[start : end + 1])
        except ValueError:
            return None
    for part in path.split("."):
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and part.isdigit() and int(part) < len(data):
            data = data[int(part)]
        else:
            return None
    return data


def parse_score(content: Any, parse: JudgeParse | None = None) -> float | None:
    """The number in a judge's reply (see JudgeParse), or None when there is none."""
    if not isinstance(content, str):
        return None
    content = content[:MAX_REPLY_CHARS]
    if parse is not None and parse.regex is not None:
        match = re.search(parse.regex, content)
        if match is None:
            return None
        value: Any = match.group(1) if match.re.groups else match.group(0)
    elif parse is not None and parse.json_field is not None:
        value = _json_field(content, parse.json_field)
    else:
        return _first_number(content)
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def judge_cache_key(**parts: Any) -> str:
    """sha256 of the parts (sorted by name): what makes two judge calls the same call."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


__all__ = ["MAX_REPLY_CHARS", "JudgeParse", "judge_cache_key", "parse_score"]

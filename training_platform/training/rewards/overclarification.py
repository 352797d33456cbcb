"""`overclarification_penalty`: discourages asking the user clarifying questions instead of answering.

Reward = -alpha * min(count, cap), count = the number of sentences ending in "?" (optionally only those
matching one of `patterns`). Reasoning inside <think>...</think> is not counted by default: questions a model
asks itself while thinking are not asked back to the user.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator

from training_platform.training.rewards import RewardFn, RewardParams, completion_text, register_reward

# A sentence ends after . ! ? (or a run of them, optionally followed by closing quotes / brackets / markdown
# emphasis) followed by whitespace, or at a line break.
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])[\"'”’)\]*_]*\s+|\n+")
_TRAILING_CLOSERS = "\"'”’)]*_ \t"
_THINK_BLOCK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL)
_THINK_TAG = re.compile(r"</?think>")


class OverclarificationParams(RewardParams):
    alpha: float = Field(0.07, ge=0, description="Penalty per clarifying question.")
    cap: int = Field(3, ge=0, le=10_000, description="Questions beyond this many are not penalised further.")
    patterns: list[str] | None = Field(
        None,
        min_length=1,
        description="Count only question sentences matching one of these regexes (case-insensitive).",
    )
    ignore_think: bool = Field(True, description="Do not count questions inside <think>...</think>.")

    @field_validator("patterns")
    @classmethod
    def _compile(cls, value: list[str] | None) -> list[str] | None:
        for pattern in value or []:
            try:
                re.compile(pattern, re.IGNORECASE)
            except re.error as exc:
                raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None
        return value


def question_sentences(text: str) -> list[str]:
    sentences = (s.strip().rstrip(_TRAILING_CLOSERS) for s in _SENTENCE_SPLIT.split(text))
    return [s for s in sentences if s.endswith("?")]


@register_reward(
    "overclarification_penalty",
    OverclarificationParams,
    "-alpha * min(number of clarifying questions asked back, cap).",
)
def build_overclarification_penalty(params: OverclarificationParams) -> RewardFn:
    regexes = [re.compile(p, re.IGNORECASE) for p in params.patterns or []]

    def count_questions(text: str) -> int:
        text = (_THINK_BLOCK if params.ignore_think else _THINK_TAG).sub("\n", text)
        questions = question_sentences(text)
        if regexes:
            questions = [q for q in questions if any(r.search(q) for r in regexes)]
        return len(questions)

    def overclarification_penalty(completions: list[Any], **kwargs: Any) -> list[float | None]:
        rewards: list[float | None] = []
        for completion in completions:
            count = min(count_questions(completion_text(completion)), params.cap)
            rewards.append(-params.alpha * count if count else 0.0)
        return rewards

    return overclarification_penalty

"""turn_filter: remove rows with empty or malformed turns.

A row is removed when it is not valid in its format (wrong roles, non-string content, ...), when one of its turns or
text fields is empty/whitespace-only, when a chat's roles do not alternate user/assistant (after an optional leading
system turn; tool turns may follow assistant turns), when a chat does not end with an assistant turn, or when its
turn count is out of [min_turns, max_turns]."""

from __future__ import annotations

from pydantic import Field

from training_platform.data.operators.base import Filter, OpParams, register_operator
from training_platform.data.text import chat_turns, iter_texts


class TurnParams(OpParams):
    require_valid: bool = Field(True, description="Remove rows that fail the format's validation.")
    drop_empty: bool = Field(True, description="Remove rows with an empty turn or text field.")
    require_alternation: bool = Field(True, description="Chats: user/assistant turns alternate, system only first.")
    require_final_assistant: bool = Field(True, description="SFT chats (messages/sharegpt) end with the assistant.")
    min_turns: int | None = Field(None, ge=1, le=100_000)
    max_turns: int | None = Field(None, ge=1, le=100_000)


def alternation_problem(roles: list[str | None]) -> str | None:
    """None if the roles are [system?] then user/assistant alternating starting with user; tool turns only right
    after an assistant or another tool turn, and the assistant may continue after a tool turn."""
    expected = "user"
    previous = None
    for i, role in enumerate(roles):
        if role == "system":
            if i != 0:
                return f"turn {i}: system turn after the start"
        elif role == "tool":
            if previous not in ("assistant", "tool"):
                return f"turn {i}: tool turn not after an assistant turn"
        elif role == "assistant" and previous == "tool":
            pass  # the assistant continues after a tool result
        else:
            if role != expected:
                return f"turn {i}: expected {expected}, got {role}"
            expected = "assistant" if role == "user" else "user"
        previous = role
    return None


@register_operator("turn_filter", TurnParams)
class TurnFilter(Filter[TurnParams]):
    def check(self, row, text: str) -> str | None:
        from training_platform.data.formats import validate_row

        p, fmt = self.params, self.ctx.fmt
        if p.require_valid and fmt is not None:
            problems = validate_row(fmt, row)
            if problems:
                return f"invalid: {problems[0][0]}: {problems[0][1]}"
        turns = chat_turns(row, fmt)
        if p.drop_empty:
            if turns is not None:
                for i, turn in enumerate(turns):
                    if not isinstance(turn["content"], str) or not turn["content"].strip():
                        return f"turn {i} ({turn['role']}) is empty"
            if isinstance(row, dict):
                for field in p.fields or [f for f in row if isinstance(row[f], str)]:
                    if field in row and isinstance(row[field], str) and not row[field].strip() and field != "input":
                        return f"field {field} is empty"
            if not any(t.strip() for t in iter_texts(row, fmt, p.fields)):
                return "no text"
        if turns is not None:
            roles = [t["role"] for t in turns]
            if p.require_alternation:
                problem = alternation_problem(roles)
                if problem:
                    return f"malformed turns: {problem}"
            if p.require_final_assistant and fmt in ("messages", "sharegpt") and roles and roles[-1] != "assistant":
                return f"malformed turns: last turn is {roles[-1]}, not assistant"
            n = len(turns)
        else:
            n = None
        if n is not None and p.min_turns is not None and n < p.min_turns:
            return f"turns={n} < min {p.min_turns}"
        if n is not None and p.max_turns is not None and n > p.max_turns:
            return f"turns={n} > max {p.max_turns}"
        return None

"""The text inside a row: which fields carry text for each format, how to read and rewrite them, and the shared
normalisations (exact-duplicate key, word tokens for shingles and n-grams).

Every data tool (clean, dedup, score, report, contamination) looks at rows through these functions, so "the text of
a row" means the same thing everywhere:

- messages: every turn's content; sharegpt: every turn's value
- alpaca: system, instruction, input, output
- prompt_completion / kto: prompt, completion (strings or message contents)
- preference: prompt, chosen, rejected
- rl_prompt: prompt, answer; verl: prompt contents and reward_model.ground_truth
- text: text; unknown formats: every string anywhere in the row

`fields` (top-level field names) narrows that to a subset, e.g. `["prompt"]` to deduplicate prompts only.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterator
from typing import Any

TEXT_FIELDS: dict[str, tuple[str, ...]] = {
    "messages": ("messages",),
    "sharegpt": ("conversations",),
    "alpaca": ("system", "instruction", "input", "output"),
    "prompt_completion": ("prompt", "completion"),
    "text": ("text",),
    "preference": ("prompt", "chosen", "rejected"),
    "kto": ("prompt", "completion"),
    "rl_prompt": ("prompt", "answer"),
    "verl": ("prompt", "reward_model"),
}
# Fields whose text is the model's answer/response (difficulty features, length of the reply).
RESPONSE_FIELDS: dict[str, tuple[str, ...]] = {
    "alpaca": ("output",),
    "prompt_completion": ("completion",),
    "kto": ("completion",),
    "preference": ("chosen",),
    "rl_prompt": ("answer",),
    "verl": ("reward_model",),
}
CHAT_FORMATS = ("messages", "sharegpt")
# Keys of nested objects that hold text: message content, sharegpt value, verl ground truth.
_TEXT_KEYS = ("content", "value", "ground_truth")


def _fields_of(row: dict, fmt: str | None, fields: list[str] | tuple[str, ...] | None) -> list[str]:
    if fields:
        return [f for f in fields if f in row]
    if fmt in TEXT_FIELDS:
        return [f for f in TEXT_FIELDS[fmt] if f in row]
    return list(row)


def _walk(value: Any, known: bool) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _walk(item, known)
    elif isinstance(value, dict):
        if known:
            for key in _TEXT_KEYS:
                if isinstance(value.get(key), str):
                    yield value[key]
        else:
            for item in value.values():
                yield from _walk(item, known)


def iter_texts(row: Any, fmt: str | None = None, fields: list[str] | tuple[str, ...] | None = None) -> Iterator[str]:
    """Every text string of the row (see the module docstring), in field order."""
    if isinstance(row, str):
        yield row
        return
    if not isinstance(row, dict):
        return
    known = fmt in TEXT_FIELDS
    for field in _fields_of(row, fmt, fields):
        yield from _walk(row[field], known)


def row_text(
    row: Any, fmt: str | None = None, fields: list[str] | tuple[str, ...] | None = None, sep: str = "\n"
) -> str:
    """The row's texts joined by `sep`."""
    return sep.join(iter_texts(row, fmt, fields))


def response_text(row: Any, fmt: str | None) -> str:
    """The answer/response part of a row: the assistant turns of a chat, the output/completion/chosen/answer."""
    if not isinstance(row, dict):
        return ""
    turns = chat_turns(row, fmt)
    if turns is not None:
        return "\n".join(t["content"] for t in turns if t["role"] == "assistant" and isinstance(t["content"], str))
    fields = RESPONSE_FIELDS.get(fmt) if fmt is not None else None
    if not fields:
        return row_text(row, fmt)
    texts = []
    for field in fields:
        value = row.get(field)
        if isinstance(value, int | float) and not isinstance(value, bool):
            texts.append(str(value))
        elif isinstance(value, list):
            texts += [
                m["content"]
                for m in value
                if isinstance(m, dict) and m.get("role") == "assistant" and isinstance(m.get("content"), str)
            ]
        else:
            texts += list(_walk(value, True))
    return "\n".join(texts)


def map_texts(
    row: Any, fmt: str | None, fn: Callable[[str], str], fields: list[str] | tuple[str, ...] | None = None
) -> Any:
    """A copy of the row with `fn` applied to each of its text strings (non-text values untouched). Returns the
    same object when nothing changed, so callers can count modified rows with `is`."""
    if not isinstance(row, dict):
        return row
    known = fmt in TEXT_FIELDS
    changed = False

    def walk(value: Any) -> Any:
        nonlocal changed
        if isinstance(value, str):
            new = fn(value)
            if new != value:
                changed = True
                return new
            return value
        if isinstance(value, list):
            new_items = [walk(v) for v in value]
            return new_items if any(a is not b for a, b in zip(new_items, value, strict=True)) else value
        if isinstance(value, dict):
            if known:
                out = value
                for key in _TEXT_KEYS:
                    if isinstance(value.get(key), str):
                        new = walk(value[key])
                        if new is not value[key]:
                            out = dict(out) if out is value else out
                            out[key] = new
                return out
            items = {k: walk(v) for k, v in value.items()}
            return items if any(items[k] is not value[k] for k in value) else value
        return value

    out = row
    for field in _fields_of(row, fmt, fields):
        new = walk(row[field])
        if new is not row[field]:
            out = dict(out) if out is row else out
            out[field] = new
    return out if changed else row


def chat_turns(row: Any, fmt: str | None) -> list[dict] | None:
    """Turns as {"role", "content"} for chat-shaped rows (messages, sharegpt, conversational prompt/completion,
    verl prompts); None for rows that are not chats."""
    if not isinstance(row, dict):
        return None
    from training_platform.data.formats import SHAREGPT_ROLES

    if fmt == "messages" and isinstance(row.get("messages"), list):
        return [
            {"role": m.get("role"), "content": m.get("content")}
            if isinstance(m, dict)
            else {"role": None, "content": m}
            for m in row["messages"]
        ]
    if fmt == "sharegpt" and isinstance(row.get("conversations"), list):
        return [
            {"role": SHAREGPT_ROLES.get(t["from"]) if "from" in t else None, "content": t.get("value")}
            if isinstance(t, dict)
            else {"role": None, "content": t}
            for t in row["conversations"]
        ]
    if fmt in ("prompt_completion", "kto", "rl_prompt", "verl") and isinstance(row.get("prompt"), list):
        turns = list(row["prompt"])
        if isinstance(row.get("completion"), list):
            turns += row["completion"]
        return [
            {"role": m.get("role"), "content": m.get("content")}
            if isinstance(m, dict)
            else {"role": None, "content": m}
            for m in turns
        ]
    return None


def turn_count(row: Any, fmt: str | None) -> int:
    """Chat turns of a chat row; otherwise 2 for formats with a prompt and a reply, 1 for single texts."""
    turns = chat_turns(row, fmt)
    if turns is not None:
        return len(turns)
    if fmt in ("alpaca", "prompt_completion", "kto", "preference"):
        return 2
    return 1


# ---------------------------------------------------------------------------------------------- normalisation

# Punctuation/symbols (anything that is not a word character or whitespace) and underscores become spaces.
_NON_WORD = re.compile(r"[^\w\s]|_")
# The same for ASCII text, as a byte translation table (much faster than the regex).
_ASCII_NON_WORD = bytes(c if c < 128 and chr(c).isalnum() else 32 for c in range(256))


def normalize_for_exact(text: str) -> str:
    """Exact-duplicate key: NFKC, case-folded, runs of whitespace collapsed to one space, stripped."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def shingle_words(text: str) -> list[str]:
    """Word tokens for MinHash shingles and contamination n-grams: lowercased, punctuation and symbols removed,
    split on whitespace ("Hello, World!" -> ["hello", "world"])."""
    if text.isascii():
        return text.lower().encode().translate(_ASCII_NON_WORD).decode().split()
    return _NON_WORD.sub(" ", text.lower()).split()


def whitespace_tokens(text: str) -> list[str]:
    """Tokens for distinct-n and n-gram entropy: lowercased, split on whitespace (punctuation stays attached)."""
    return text.lower().split()

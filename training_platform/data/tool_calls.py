"""The hermes tool-call text format, in pure Python: what the model writes to call a tool and what the chat template
shows it about the tools it may call. Training (verl's agent loop), serving (the OpenAI route) and the demo share it.

- A call is `<tool_call>{"name": NAME, "arguments": {...}}</tool_call>` in the assistant's text. `render_call`
  writes it with `json.dumps` as the chat template's `tojson` does (transformers' filter: `ensure_ascii=False`,
  default separators, keys in their order), so a call rendered here and one rendered by the template are the same
  bytes (tests/demo checks it against the demo template).
- `parse(text)` finds the calls: `(content, calls, malformed_count)`. `content` is the text around the blocks
  (stripped); each call is `{"name": str, "arguments": dict}`; a block that is not such a JSON object (bad JSON, no
  name, arguments not an object, too long, past `MAX_CALLS`), or a `<tool_call>` never closed, is counted in
  `malformed_count` and left out of both (verl's hermes parser drops them silently; an agent loop counts them).
- `tools_block(tools)` is the system turn the demo template renders first when `tools=` is given, so an SFT row
  carrying it as a plain system message and an RL prompt rendered with `tools=` are the same tokens.

The text pieces are the demo template's (`demo/tiny_model.py`, the layer below this one), so there is one copy.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from training_platform.demo.tiny_model import TOOL_CALL_END, TOOL_CALL_START, TOOLS_HEAD, TOOLS_TAIL

__all__ = [
    "MAX_CALLS",
    "MAX_CALL_CHARS",
    "MAX_TEXT_CHARS",
    "TOOL_CALL_END",
    "TOOL_CALL_START",
    "parse",
    "render_call",
    "render_calls",
    "tools_block",
]

MAX_CALLS = 64  # calls read from one text; more are counted as malformed
MAX_CALL_CHARS = 64 * 1024  # the JSON of one call
MAX_TEXT_CHARS = 1_000_000  # text parsed at most (a generation is far shorter); the rest is content, unparsed

_BLOCK = re.compile(re.escape(TOOL_CALL_START) + r"(.*?)" + re.escape(TOOL_CALL_END), re.DOTALL)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def render_call(name: str, arguments: Mapping[str, Any] | str) -> str:
    """One call as hermes text. `arguments` is a mapping (dumped like Jinja `tojson`) or already a JSON string
    (the OpenAI wire form), kept as given, as the template keeps it."""
    args = arguments if isinstance(arguments, str) else _dumps(dict(arguments))
    return f'{TOOL_CALL_START}{{"name": {_dumps(name)}, "arguments": {args}}}{TOOL_CALL_END}'


def render_calls(content: str | None, calls: Sequence[Mapping[str, Any]]) -> str:
    """An assistant message's text as the demo template renders it: its content, then each call on its own line.
    A call is `{"name", "arguments"}` or OpenAI's `{"function": {"name", "arguments"}}`."""
    out = content or ""
    for i, call in enumerate(calls):
        fn = call.get("function", call)
        if out or i:
            out += "\n"
        out += render_call(fn["name"], fn["arguments"])
    return out


def _call(block: str) -> dict[str, Any] | None:
    if len(block) > MAX_CALL_CHARS:
        return None
    try:
        value = json.loads(block)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or set(value) != {"name", "arguments"}:
        return None
    name, arguments = value["name"], value["arguments"]
    if not isinstance(name, str) or not name or not isinstance(arguments, dict):
        return None
    return {"name": name, "arguments": arguments}


def parse(text: str) -> tuple[str, list[dict[str, Any]], int]:
    """`(content, calls, malformed_count)` of a model's text; never raises on any string."""
    head, tail = text[:MAX_TEXT_CHARS], text[MAX_TEXT_CHARS:]
    calls: list[dict[str, Any]] = []
    malformed = 0
    pieces: list[str] = []
    end = 0
    for match in _BLOCK.finditer(head):
        pieces.append(head[end : match.start()])
        end = match.end()
        call = _call(match.group(1))
        if call is None or len(calls) >= MAX_CALLS:
            malformed += 1
        else:
            calls.append(call)
    rest = head[end:]
    opened = rest.find(TOOL_CALL_START)
    if opened >= 0:  # a call never closed (cut by the token budget, or a stray tag): not a call
        malformed += 1
        rest = rest[:opened]
    pieces.append(rest)
    if not calls and not malformed:
        return text, [], 0  # no call: the text exactly as written
    return ("".join(pieces) + tail).strip(), calls, malformed


def tools_block(tools: Sequence[Mapping[str, Any]]) -> str:
    """The system turn's text listing `tools` (OpenAI function schemas), as the demo template renders it."""
    return TOOLS_HEAD + "".join("\n" + _dumps(dict(tool)) for tool in tools) + TOOLS_TAIL

"""The hermes tool-call codec (data/tool_calls.py): rendering, parsing with malformed blocks counted, the tools block.
Its agreement with the demo chat template, token for token: tests/demo/test_tool_template.py."""

from __future__ import annotations

import json

import pytest

from training_platform.data.tool_calls import (
    MAX_CALL_CHARS,
    MAX_CALLS,
    parse,
    render_call,
    render_calls,
    tools_block,
)

pytestmark = pytest.mark.unit

CALC = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
    },
}


def test_render_call_is_json_dumps_of_name_and_arguments():
    text = render_call("calculator", {"expression": "37*48"})
    assert text == '<tool_call>{"name": "calculator", "arguments": {"expression": "37*48"}}</tool_call>'
    inner = text.removeprefix("<tool_call>").removesuffix("</tool_call>")
    assert inner == json.dumps({"name": "calculator", "arguments": {"expression": "37*48"}})
    # Non-ASCII is kept (transformers' tojson: ensure_ascii=False); a JSON string of arguments is kept as given.
    assert (
        render_call("echo", {"text": "café"})
        == '<tool_call>{"name": "echo", "arguments": {"text": "café"}}</tool_call>'
    )
    assert render_call("python", '{"code":"print(1)"}').endswith('"arguments": {"code":"print(1)"}}</tool_call>')


@pytest.mark.parametrize(
    "content, calls",
    [
        ("", [{"name": "calculator", "arguments": {"expression": "37*48"}}]),
        ("Let me compute.", [{"name": "calculator", "arguments": {"expression": "1+2"}}]),
        ("Two at once:", [{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": [1, {"y": None}]}}]),
        ("", [{"name": "python", "arguments": {"code": "print('<b>')\nprint(\"ü\")"}}]),
        ("No call here, #### 1776", []),
    ],
)
def test_round_trip(content, calls):
    text = render_calls(content, calls)
    assert parse(text) == (content, calls, 0)
    openai = [{"id": "call_1", "type": "function", "function": c} for c in calls]
    assert render_calls(content, openai) == text, "OpenAI's {function: ...} form renders the same"


def test_text_without_calls_is_returned_exactly():
    for text in ("  spaced  \n", "", "#### 8", "<tool_call", "</tool_call> only the end"):
        assert parse(text) == (text, [], 0)


def test_malformed_blocks_are_counted_and_removed_never_raised():
    good = render_call("calculator", {"expression": "2*3"})
    bad_blocks = [
        "<tool_call>{not json}</tool_call>",
        '<tool_call>{"name": "x"}</tool_call>',  # no arguments
        '<tool_call>{"name": "x", "arguments": "2*3"}</tool_call>',  # arguments not an object
        '<tool_call>{"name": 3, "arguments": {}}</tool_call>',
        '<tool_call>{"name": "", "arguments": {}}</tool_call>',
        '<tool_call>{"name": "x", "arguments": {}, "extra": 1}</tool_call>',
        "<tool_call>[1, 2]</tool_call>",
        "<tool_call>" + "[" * 100_000 + "</tool_call>",  # too long / too deep: malformed, not a RecursionError
    ]
    for bad in bad_blocks:
        content, calls, malformed = parse(f"before {bad} middle {good} after")
        assert (calls, malformed) == ([{"name": "calculator", "arguments": {"expression": "2*3"}}], 1), bad
        assert content == "before  middle  after"
    # a call cut off by the token budget is not a call
    assert parse(f'{good}\n<tool_call>{{"name": "calculator", "argu') == ("", [parse(good)[1][0]], 1)


def test_bounds_on_calls_and_their_size():
    many = "\n".join(render_call("a", {"i": i}) for i in range(MAX_CALLS + 3))
    _, calls, malformed = parse(many)
    assert len(calls) == MAX_CALLS and malformed == 3
    huge = render_call("a", {"s": "x" * MAX_CALL_CHARS})
    assert parse(huge) == ("", [], 1)


def test_tools_block_lists_each_schema_as_json():
    block = tools_block([CALC])
    assert block.startswith("Tools: ") and block.endswith("\n</tools>")
    assert "\n" + json.dumps(CALC) + "\n" in block
    assert parse(block)[2] == 1, "the format example in the header is not a call"

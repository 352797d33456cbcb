"""Tools on the OpenAI route, without a worker: the reply parsing (`reply_choice`), the request's checks, the prompt the
worker renders (`serving.render_prompt` with the demo template), the worker's re-check of the message (`_parse`),
and the round trip (the `tool_calls` message the route returns, sent back, renders to the hermes text training uses).
The same through the real worker and the official client: tests/api/test_playground.py."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from training_platform.api.routes.openai_compat import ChatCompletionRequest, OpenAIMessage, reply_choice  # noqa: E402
from training_platform.data.tool_calls import render_call, render_calls, tools_block  # noqa: E402
from training_platform.demo.tiny_model import create_tiny_model  # noqa: E402
from training_platform.inference.serving import ToolsNotRendered, render_prompt  # noqa: E402

pytestmark = pytest.mark.unit

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
            "required": ["city"],
        },
    },
}
CALC = {
    "type": "function",
    "function": {
        "name": "calculator",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
    },
}
ARGS = {"city": "Zürich", "unit": "c"}  # non-ASCII: written as training's tojson writes it (ensure_ascii=False)


@pytest.fixture(scope="module")
def served_model(tmp_path_factory):
    """What the worker's cache holds, as far as render_prompt looks: the demo tokenizer (tool-aware template)."""
    from transformers import AutoTokenizer

    model_dir = create_tiny_model(tmp_path_factory.mktemp("tiny"), hidden_size=32, num_layers=1, intermediate_size=64)
    return SimpleNamespace(tokenizer=AutoTokenizer.from_pretrained(model_dir))


def _request(**body) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(
        {"model": "job-1/final", "messages": [{"role": "user", "content": "weather?"}], **body}
    )


# ---------------------------------------------------------------------------------------------- the reply


def test_a_hermes_call_becomes_tool_calls():
    text = render_call("get_weather", ARGS)
    choice = reply_choice(0, text, "stop", parse_calls=True)
    assert choice["finish_reason"] == "tool_calls" and choice["index"] == 0
    message = choice["message"]
    assert message["content"] is None  # nothing around the call
    [call] = message["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_") and len(call["id"]) == len("call_") + 24
    assert call["function"] == {"name": "get_weather", "arguments": json.dumps(ARGS, ensure_ascii=False)}


def test_text_around_calls_is_the_content_and_each_call_is_listed():
    text = "Let me look.\n" + render_call("get_weather", ARGS) + "\n" + render_call("calculator", {"expression": "2*3"})
    choice = reply_choice(1, text, "stop", parse_calls=True)
    assert choice["message"]["content"] == "Let me look."
    assert [c["function"]["name"] for c in choice["message"]["tool_calls"]] == ["get_weather", "calculator"]
    ids = [c["id"] for c in choice["message"]["tool_calls"]]
    assert len(set(ids)) == 2


@pytest.mark.parametrize(
    "text",
    [
        "just text",
        '<tool_call>{"name": "get_weather", "arguments": "not an object"}</tool_call>',  # malformed only
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Pa',  # cut by the token budget
    ],
)
def test_no_well_formed_call_is_plain_text(text):
    choice = reply_choice(0, text, "length", parse_calls=True)
    assert choice["message"] == {"role": "assistant", "content": text} and choice["finish_reason"] == "length"


def test_without_tools_offered_calls_are_not_parsed():
    text = render_call("get_weather", ARGS)
    choice = reply_choice(0, text, "stop", parse_calls=False)
    assert choice["message"] == {"role": "assistant", "content": text} and choice["finish_reason"] == "stop"


# ---------------------------------------------------------------------------------------------- the request


def _locs(exc: ValidationError) -> set[str]:
    return {".".join(str(p) for p in e["loc"]) for e in exc.errors()}


@pytest.mark.parametrize(
    ("body", "loc", "words"),
    [
        ({"tools": [WEATHER], "tool_choice": "required"}, "tool_choice", "constrained decoding"),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
            "tool_choice",
            "named function",
        ),
        ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice", '"auto" or "none"'),
        ({"tools": [WEATHER] * 2}, "tools", "unique"),
        ({"tools": []}, "tools", "at least 1"),
        ({"tools": [{**CALC, "function": {**CALC["function"], "name": f"t{i}"}} for i in range(33)]}, "tools", "32"),
        ({"tools": [{"type": "retrieval", "function": CALC["function"]}]}, "tools.0.type", "function"),
        ({"tools": [{"type": "function", "function": {"name": "has space"}}]}, "tools.0.function.name", "pattern"),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]},
            "tools.0.function.parameters",
            "type: object",
        ),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"properties": {"x": 1}}}}]},
            "tools.0.function.parameters",
            "properties",
        ),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "description": "d" * 5000}}]},
            "tools.0.function.description",
            "4096",
        ),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"x": "y" * 17000}}}]},
            "tools.0",
            "at most 16384",
        ),
        ({"tools": [WEATHER], "parallel_tool_calls": False}, "parallel_tool_calls", "only true"),
        ({"tools": [{"type": "function", "function": {"name": "f", "extra": 1}}]}, "tools.0.function.extra", ""),
    ],
)
def test_bad_tools_are_refused_with_the_field(body, loc, words):
    with pytest.raises(ValidationError) as info:
        _request(**body)
    assert loc in _locs(info.value), info.value
    assert words in str(info.value), info.value


CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


@pytest.mark.parametrize(
    ("message", "loc", "words"),
    [
        ({"role": "assistant", "content": None}, "messages.0", "content is required"),
        ({"role": "user", "content": "x", "tool_calls": [CALL]}, "messages.0", "only an assistant"),
        ({"role": "tool", "content": "12 C"}, "messages.0", "tool_call_id"),
        ({"role": "user", "content": "x", "tool_call_id": "call_1"}, "messages.0", "only a tool message"),
        (
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{**CALL, "function": {"name": "f", "arguments": "["}}],
            },
            "messages.0.tool_calls.0.function.arguments",
            "JSON object",
        ),
        (
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{**CALL, "function": {"name": "f", "arguments": "[]"}}],
            },
            "messages.0.tool_calls.0.function.arguments",
            "JSON list",
        ),
        (
            {"role": "assistant", "content": None, "tool_calls": [{**CALL, "type": "x"}]},
            "messages.0.tool_calls.0.type",
            "",
        ),
    ],
)
def test_bad_tool_messages_are_refused_with_the_field(message, loc, words):
    with pytest.raises(ValidationError) as info:
        _request(messages=[message])
    assert loc in _locs(info.value), info.value
    assert words in str(info.value), info.value


def test_tool_choice_none_offers_no_tools():
    assert _request(tools=[WEATHER], tool_choice="none").offered_tools() is None
    assert _request(tools=[WEATHER], tool_choice="auto").offered_tools() == [WEATHER]
    assert _request(tools=[WEATHER]).offered_tools() == [WEATHER]
    assert _request().offered_tools() is None
    # fields the client left out stay out of what the template sees (strict is accepted, not shown)
    bare = {"type": "function", "function": {"name": "ping", "strict": True}}
    assert _request(tools=[bare]).offered_tools() == [{"type": "function", "function": {"name": "ping"}}]


# ---------------------------------------------------------------------------------------------- the prompt


def test_tools_render_exactly_as_apply_chat_template(served_model):
    tok = served_model.tokenizer
    messages = [m.for_template() for m in _request().messages]
    prompt = render_prompt(served_model, messages, tools=[WEATHER, CALC])
    assert prompt == tok.apply_chat_template(
        messages, tools=[WEATHER, CALC], tokenize=False, add_generation_prompt=True
    )
    assert prompt.startswith(f"<|im_start|>system\n{tools_block([WEATHER, CALC])}<|im_end|>\n")
    assert render_prompt(served_model, messages) == tok.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )  # no tools: as before


def test_a_template_that_ignores_tools_is_refused(served_model):
    from transformers import AutoTokenizer

    blind = AutoTokenizer.from_pretrained(served_model.tokenizer.name_or_path)
    blind.chat_template = (
        "{%- for m in messages -%}{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' -}}"
        "{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
    )
    messages = [{"role": "user", "content": "use get_weather please"}]  # the name is there, the tools are not
    with pytest.raises(ToolsNotRendered, match="ignores `tools`") as info:
        render_prompt(SimpleNamespace(tokenizer=blind), messages, tools=[WEATHER])
    assert info.value.loc == "tools"
    render_prompt(SimpleNamespace(tokenizer=blind), messages)  # without tools it serves as before
    blind.chat_template = None
    with pytest.raises(ToolsNotRendered, match="no chat template"):
        render_prompt(SimpleNamespace(tokenizer=blind), messages, tools=[WEATHER])


def test_round_trip_renders_the_hermes_text_training_uses(served_model):
    """The route's `tool_calls` message, sent back with the tool's result, renders as training renders the same
    conversation (calls with object arguments, as the agent loop and the SFT transcripts hold them)."""
    from training_platform.workers.inference_tasks import _message, _tools

    returned = reply_choice(0, render_call("get_weather", ARGS), "stop", parse_calls=True)["message"]
    call_id = returned["tool_calls"][0]["id"]
    follow_up = _request(
        tools=[WEATHER],
        messages=[
            {"role": "user", "content": "Weather in Zürich?"},
            returned,
            {"role": "tool", "tool_call_id": call_id, "content": "12 C"},
        ],
    )
    payload = json.loads(json.dumps([m.for_template() for m in follow_up.messages]))  # over the broker
    messages = [_message(m) for m in payload]  # the worker's re-check
    prompt = render_prompt(served_model, messages, tools=_tools(follow_up.offered_tools()))

    training = [
        {"role": "user", "content": "Weather in Zürich?"},
        {"role": "assistant", "content": "", "tool_calls": [{"name": "get_weather", "arguments": ARGS}]},
        {"role": "tool", "content": "12 C"},
    ]
    expected = served_model.tokenizer.apply_chat_template(
        training, tools=[WEATHER], tokenize=False, add_generation_prompt=True
    )
    assert prompt == expected
    hermes = render_calls(None, [{"name": "get_weather", "arguments": ARGS}])
    assert f"<|im_start|>assistant\n{hermes}<|im_end|>\n<|im_start|>tool\n12 C<|im_end|>\n" in prompt

    # a client that re-spaces the arguments' JSON still renders training's bytes (arguments are parsed first)
    respaced = json.loads(json.dumps(returned))
    respaced["tool_calls"][0]["function"]["arguments"] = json.dumps(ARGS, separators=(",", ":"))
    again = OpenAIMessage.model_validate(respaced).for_template()
    assert again["tool_calls"][0]["function"]["arguments"] == ARGS


def test_the_worker_refuses_a_forged_tool_message():
    from training_platform.workers.inference_tasks import RequestRefused, _parse

    base = {"path": "/x", "max_new_tokens": 4, "temperature": 0, "top_p": 1, "seed": 0, "timeout_s": 1}
    for messages, tools in [
        ([{"role": "assistant", "content": None}], None),  # no content, no calls
        (
            [{"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}],
            None,
        ),
        ([{"role": "user", "content": "x"}], [WEATHER] * 33),
        ([{"role": "user", "content": "x"}], {"not": "a list"}),
    ]:
        with pytest.raises(RequestRefused) as info:
            _parse({**base, "messages": messages, "tools": tools})
        assert info.value.status == 400, (messages, tools)

"""The demo chat template's tool support: without tools and tool_calls it renders byte for byte what the template
rendered before tools existed (existing checkpoints and tests depend on it); with them it agrees with the hermes
codec (data/tool_calls.py) token for token, and verl's continuous-token builder (Qwen family: the demo model is a
qwen2) merges a tool turn against it."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from training_platform.data.tool_calls import parse, render_call, render_calls, tools_block  # noqa: E402
from training_platform.demo.tiny_model import CHAT_TEMPLATE, create_tiny_model  # noqa: E402

pytestmark = pytest.mark.unit

# The template as it was before tool support, verbatim: the pin of the byte-identity rule.
OLD_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- generation -%}"
    "{{- message['content'] + '<|im_end|>' -}}"
    "{%- endgeneration -%}"
    "{{- '\\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- endif -%}"
)

CALC = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression (+ - * / // % **).",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "e.g. 37*48"}},
            "required": ["expression"],
        },
    },
}
PYTHON = {
    "type": "function",
    "function": {
        "name": "python",
        "description": "Run Python; stdout is the result.",
        "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
    },
}

U = {"role": "user", "content": "3+5="}
A = {"role": "assistant", "content": "8"}
CONVERSATIONS = [
    [U],
    [U, A],
    [{"role": "system", "content": "Be brief."}, U, A],
    [U, A, {"role": "user", "content": "and 2+2?"}, {"role": "assistant", "content": "4"}],
    [{"role": "user", "content": "ünïcödé café 😀 日本語 {{ '}}' }}"}, {"role": "assistant", "content": "ok\n\n"}],
    [{"role": "user", "content": ""}, {"role": "assistant", "content": ""}],
    [{"role": "assistant", "content": "starts with the assistant"}],
    [{"role": "user", "content": "x"}, {"role": "tool", "content": "a tool's turn renders like any role"}],
    [{"role": "developer", "content": "d"}, U],
    [{"role": "user", "content": "<tool_call>not a call</tool_call>"}, {"role": "assistant", "content": "fine"}],
    [U, {"role": "assistant", "content": "no calls", "tool_calls": []}],  # an empty list is no calls
]
CALL_CONVERSATION = [
    {"role": "user", "content": "What is 37*48?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "calculator", "arguments": {"expression": "37*48"}}}],
    },
    {"role": "tool", "content": "1776"},
    {"role": "assistant", "content": "#### 1776"},
]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    model_dir = create_tiny_model(tmp_path_factory.mktemp("tiny"), hidden_size=32, num_layers=1, intermediate_size=64)
    tok = AutoTokenizer.from_pretrained(model_dir)
    assert tok.chat_template == CHAT_TEMPLATE
    return tok


def _text(tok, messages, template=None, **kw) -> str:
    return tok.apply_chat_template(messages, tokenize=False, chat_template=template, **kw)


def _ids(tok, messages, **kw) -> list[int]:
    return tok.apply_chat_template(messages, tokenize=True, return_dict=True, **kw)["input_ids"]


@pytest.mark.parametrize("conversation", CONVERSATIONS, ids=range(len(CONVERSATIONS)))
@pytest.mark.parametrize("add_generation_prompt", [False, True])
def test_without_tools_the_rendering_is_byte_identical(tokenizer, conversation, add_generation_prompt):
    kw = {"add_generation_prompt": add_generation_prompt}
    messages = [{k: v for k, v in m.items() if k != "tool_calls"} for m in conversation]
    old = _text(tokenizer, messages, OLD_TEMPLATE, **kw)
    assert _text(tokenizer, conversation, **kw) == old
    for empty in (None, []):
        assert _text(tokenizer, conversation, tools=empty, **kw) == old
    if not add_generation_prompt and any(m["role"] == "assistant" for m in conversation):
        new = tokenizer.apply_chat_template(
            conversation, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
        before = tokenizer.apply_chat_template(
            messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True, chat_template=OLD_TEMPLATE
        )
        assert new["input_ids"] == before["input_ids"] and new["assistant_masks"] == before["assistant_masks"]


def test_tools_render_as_a_first_system_turn_equal_to_tools_block(tokenizer):
    for tools in ([CALC], [CALC, PYTHON]):
        for conversation in ([CONVERSATIONS[0]], [CONVERSATIONS[2]], [CALL_CONVERSATION]):
            messages = conversation[0]
            plain = [{"role": "system", "content": tools_block(tools)}] + [
                {"role": m["role"], "content": render_calls(m["content"], m.get("tool_calls", []))} for m in messages
            ]
            for gen in (False, True):
                assert _ids(tokenizer, messages, tools=tools, add_generation_prompt=gen) == _ids(
                    tokenizer, plain, add_generation_prompt=gen
                ), "an SFT row (role + content only) and an RL prompt rendered with tools= are the same tokens"
    text = _text(tokenizer, [U], tools=[CALC], add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nTools: ") and '"name": "calculator"' in text


def test_assistant_tool_calls_render_as_hermes_inside_the_generation_mask(tokenizer):
    text = _text(tokenizer, CALL_CONVERSATION, tools=[CALC])
    call = render_call("calculator", {"expression": "37*48"})
    assert f"<|im_start|>assistant\n{call}<|im_end|>\n<|im_start|>tool\n1776<|im_end|>\n" in text
    out = tokenizer.apply_chat_template(
        CALL_CONVERSATION, tools=[CALC], tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    trained = [t for t, m in zip(out["input_ids"], out["assistant_masks"], strict=True) if m]
    assert tokenizer.decode(trained) == f"{call}<|im_end|>#### 1776<|im_end|>", "the tool's output is not trained"
    # content before the calls, several calls, arguments as an OpenAI JSON string, the flat {name, arguments} form
    message = {
        "role": "assistant",
        "content": "Let me check.",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "2*3"}'}},
            {"name": "python", "arguments": {"code": "print(6)"}},
        ],
    }
    no_content = {**CALL_CONVERSATION[1], "content": None}  # OpenAI: content null beside tool_calls
    assert _text(tokenizer, [U, no_content]) == _text(tokenizer, [U, CALL_CONVERSATION[1]])
    rendered = _text(tokenizer, [U, message])
    body = rendered.split("<|im_start|>assistant\n", 1)[1].removesuffix("<|im_end|>\n")
    assert body == render_calls(message["content"], message["tool_calls"])
    assert parse(body) == (
        "Let me check.",
        [
            {"name": "calculator", "arguments": {"expression": "2*3"}},
            {"name": "python", "arguments": {"code": "print(6)"}},
        ],
        0,
    )


def test_verl_qwen_continuous_token_builder_merges_a_tool_turn(tokenizer):
    """verl's agent loop: prompt (with tools) + generated call + CT's boundary newline + the tool turn's delta is the
    template's own rendering of the whole conversation, and the mask is 1 exactly on the generated tokens."""
    import verl  # noqa: F401 - `make setup` installs verl; without it this fails, never skips
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    builder = create_continuous_token_builder(tokenizer, hf_model_type="qwen2")
    assert type(builder).__name__ == "QwenContinuousTokenBuilder"
    messages = CALL_CONVERSATION[:1]
    prompt = builder.build_initial_tokens(messages, tools=[CALC])
    assert prompt == _ids(tokenizer, messages, tools=[CALC], add_generation_prompt=True)

    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    generated = tokenizer.encode(render_call("calculator", {"expression": "37*48"}), add_special_tokens=False)
    generated.append(im_end)
    merged = builder.merge_assistant_tokens(prompt, generated)
    mask, _ = builder.align_response_metadata(merged, [])
    history = CALL_CONVERSATION[:2]
    merged = builder.merge_context_tokens(history, CALL_CONVERSATION[:3], merged.token_ids, tools=[CALC])
    mask, _ = builder.align_response_metadata(merged, mask)

    assert merged.token_ids == _ids(tokenizer, CALL_CONVERSATION[:3], tools=[CALC], add_generation_prompt=True)
    assert merged.token_ids[: len(prompt) + len(generated)] == prompt + generated, "generated ids kept unchanged"
    assert mask == [1] * len(generated) + [0] * (len(merged.token_ids) - len(prompt) - len(generated))
    delta = tokenizer.decode(merged.token_ids[len(prompt) + len(generated) :])
    assert delta == "\n<|im_start|>tool\n1776<|im_end|>\n<|im_start|>assistant\n"


def test_the_demo_transcripts_write_calls_as_the_codec_does():
    """demo/agentic.py writes its calls by hand (demo/ sits below data/): they must be what render_call writes and
    what parse reads back, or SFT would teach a format the agent loop does not parse."""
    from training_platform.demo.agentic import call_text

    for a, b in ((37, 48), (7, 1000), (0, 5)):
        assert call_text(a, b) == render_call("calculator", {"expression": f"{a}*{b}"})
        content, calls, malformed = parse(call_text(a, b))
        assert (content, calls, malformed) == ("", [{"name": "calculator", "arguments": {"expression": f"{a}*{b}"}}], 0)


def test_a_tool_fraction_mixes_direct_answers_into_the_sft_transcripts_seeded():
    """bench/learning_agentic.py's start: a share of the transcripts call the tool, the rest answer at once (the
    right product); seeded, the held-out pairs unchanged, and 1.0 is the all-tool data as before."""
    from training_platform.demo.agentic import agentic_rows

    def assistant_turns(row: dict) -> list[str]:
        return [m["content"] for m in row["messages"] if m["role"] == "assistant"]

    full = agentic_rows("TOOLS", n_sft=400, n_rl=8, n_eval=8)
    assert all(len(assistant_turns(r)) == 2 for r in full["sft"])
    mixed = agentic_rows("TOOLS", n_sft=400, n_rl=8, n_eval=8, tool_fraction=0.4)
    assert mixed == agentic_rows("TOOLS", n_sft=400, n_rl=8, n_eval=8, tool_fraction=0.4)
    assert mixed["rl_eval"] == full["rl_eval"] and mixed["rl"] == full["rl"]
    with_tool = [r for r in mixed["sft"] if len(assistant_turns(r)) == 2]
    direct = [r for r in mixed["sft"] if len(assistant_turns(r)) == 1]
    assert len(with_tool) + len(direct) == 400 and 120 <= len(with_tool) <= 200
    for row in direct:
        question = row["messages"][1]["content"]
        a, b = (int(x) for x in question.rstrip("=").split("*"))
        assert row["messages"][0]["content"] == "TOOLS" and assistant_turns(row) == [f"#### {a * b}"]
    for full_row, mixed_row in zip(full["sft"], mixed["sft"], strict=True):
        assert full_row["messages"][1] == mixed_row["messages"][1], "the same questions, only the answers differ"
    with pytest.raises(ValueError, match="tool_fraction"):
        agentic_rows("TOOLS", n_sft=4, n_rl=4, n_eval=4, tool_fraction=1.5)

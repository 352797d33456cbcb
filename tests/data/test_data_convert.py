"""Format conversion: lossless round trips, rows that cannot convert (reported, nothing written), verl parquet, and the
chat-template preview."""

from __future__ import annotations

import pytest
from data_helpers import USER, read_jsonl, read_parquet, write_jsonl

from training_platform.data.convert import (
    ConversionError,
    can_convert,
    convert_file,
    convert_row,
)
from training_platform.data.formats import DatasetError, detect_format, validate_row

pytestmark = pytest.mark.unit

SYSTEM = {"role": "system", "content": "Be brief."}
REPLY = {"role": "assistant", "content": "4"}


def roundtrip(row: dict, src: str, via: str) -> dict:
    middle = convert_row(row, src, via)
    mid_fmt = detect_format(middle)
    assert validate_row(mid_fmt, middle) == [], middle
    back = convert_row(middle, mid_fmt, src if src != "preference" else _style(row))
    return back


def _style(row: dict) -> str:
    return "preference_conversational" if isinstance(row["chosen"], list) else "preference_plain"


@pytest.mark.parametrize(
    ("row", "src", "via"),
    [
        pytest.param({"messages": [SYSTEM, USER, REPLY, USER, REPLY]}, "messages", "sharegpt", id="messages-sharegpt"),
        pytest.param(
            {"messages": [{"role": "tool", "content": "x"}, USER, REPLY]},
            "messages",
            "sharegpt",
            id="messages-sharegpt-tool",
        ),
        pytest.param(
            {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]},
            "sharegpt",
            "messages",
            id="sharegpt-messages",
        ),
        pytest.param({"messages": [SYSTEM, USER, REPLY]}, "messages", "alpaca", id="messages-alpaca-system"),
        pytest.param({"messages": [USER, REPLY]}, "messages", "alpaca", id="messages-alpaca"),
        pytest.param(
            {"instruction": "Say hi.", "input": "", "output": "hi"}, "alpaca", "messages", id="alpaca-no-input-messages"
        ),
        pytest.param(
            {"instruction": "Say hi.", "input": "", "output": "hi"}, "alpaca", "sharegpt", id="alpaca-no-input-sharegpt"
        ),
        pytest.param({"prompt": "2+2=", "completion": "4"}, "prompt_completion", "messages", id="pc-messages"),
        pytest.param(
            {"prompt": [SYSTEM, USER], "completion": [REPLY]},
            "prompt_completion",
            "messages",
            id="pc-conversational-messages",
        ),
        pytest.param({"messages": [USER, REPLY, USER, REPLY]}, "messages", "prompt_completion", id="messages-pc"),
        pytest.param(
            {"prompt": "2+2=", "chosen": "4", "rejected": "5"},
            "preference",
            "preference_conversational",
            id="preference-plain-conversational",
        ),
        pytest.param(
            {"prompt": [USER], "chosen": [REPLY], "rejected": [{"role": "assistant", "content": "5"}]},
            "preference",
            "preference_plain",
            id="preference-conversational-plain",
        ),
        pytest.param(
            {"chosen": "4", "rejected": "5"}, "preference", "preference_conversational", id="preference-no-prompt"
        ),
    ],
)
def test_lossless_round_trips(row, src, via):
    assert roundtrip(row, src, via) == row


def test_verl_rl_round_trip():
    verl = {
        "data_source": "openai/gsm8k",
        "prompt": [USER],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "4"},
        "extra_info": {"split": "test", "index": 3},
    }
    rl = convert_row(verl, "verl", "rl_prompt")
    assert rl == {
        "prompt": [USER],
        "answer": "4",
        "data_source": "openai/gsm8k",
        "ability": "math",
        "extra_info": {"split": "test", "index": 3},
    }
    assert convert_row(rl, "rl_prompt", "verl") == verl


def test_rl_prompt_to_verl_moves_extra_columns_into_extra_info():
    row = {"prompt": "What is 2+2?", "answer": 4, "difficulty": "easy"}
    assert convert_row(row, "rl_prompt", "verl", index=7, data_source="arith", ability="math") == {
        "data_source": "arith",
        "prompt": [{"role": "user", "content": "What is 2+2?"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "4"},
        "extra_info": {"index": 7, "difficulty": "easy"},
    }
    with pytest.raises(ConversionError, match="reference answer"):
        convert_row({"prompt": "x"}, "rl_prompt", "verl")


def test_alpaca_with_input_merges_into_the_user_turn():
    row = {"instruction": "Add.", "input": "2+2", "output": "4"}
    messages = convert_row(row, "alpaca", "messages")
    assert messages == {"messages": [{"role": "user", "content": "Add.\n\n2+2"}, {"role": "assistant", "content": "4"}]}
    assert convert_row(messages, "messages", "alpaca") == {"instruction": "Add.\n\n2+2", "input": "", "output": "4"}


def test_implicit_prompt_is_extracted_for_plain_preference():
    row = {"chosen": [USER, REPLY], "rejected": [USER, {"role": "assistant", "content": "5"}]}
    assert convert_row(row, "preference", "preference_plain") == {
        "prompt": USER["content"],
        "chosen": "4",
        "rejected": "5",
    }


@pytest.mark.parametrize(
    ("row", "src", "dst", "field", "reason"),
    [
        pytest.param(
            {"messages": [USER, REPLY, USER, REPLY]},
            "messages",
            "alpaca",
            "messages",
            "alpaca holds one user turn",
            id="multi-turn-to-alpaca",
        ),
        pytest.param(
            {"messages": [USER, REPLY, USER]},
            "messages",
            "prompt_completion",
            "messages",
            "needs a prompt and a final assistant turn",
            id="no-final-assistant",
        ),
        pytest.param(
            {"prompt": [SYSTEM, USER], "chosen": [REPLY], "rejected": [{"role": "assistant", "content": "5"}]},
            "preference",
            "preference_plain",
            "prompt",
            "single user prompt turn",
            id="system-prompt-to-plain",
        ),
        pytest.param(
            {"prompt": [USER], "chosen": [REPLY, REPLY], "rejected": [REPLY]},
            "preference",
            "preference_plain",
            "chosen",
            "single assistant reply",
            id="two-replies-to-plain",
        ),
    ],
)
def test_rows_that_cannot_convert(row, src, dst, field, reason):
    with pytest.raises(ConversionError) as info:
        convert_row(row, src, dst)
    assert info.value.field == field
    assert reason in info.value.reason


def test_incompatible_formats():
    assert not can_convert("kto", "messages")
    assert not can_convert("messages", "verl")
    assert can_convert("preference", "preference")  # alias of preference_plain
    with pytest.raises(ValueError, match="unknown target format 'nope'"):
        convert_row({"text": "x"}, "text", "nope")
    with pytest.raises(ConversionError, match="cannot be converted"):
        convert_row({"text": "x"}, "text", "messages")


def test_convert_file_reports_bad_rows_and_writes_nothing(tmp_path):
    src = write_jsonl(
        tmp_path / "chat.jsonl",
        [
            {"messages": [USER, REPLY]},
            {"messages": [USER, REPLY, USER, REPLY]},
            {"messages": [USER]},
        ],
    )
    out = tmp_path / "alpaca.jsonl"
    with pytest.raises(DatasetError) as info:
        convert_file(src, out, "alpaca")
    assert [str(e) for e in info.value.errors] == [
        "line 2: messages: alpaca holds one user turn and one assistant reply (plus an optional system turn); "
        "this row has the turns ['user', 'assistant', 'user', 'assistant']",
        "line 3: messages: has no assistant turn to learn from",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chat.jsonl"]


def test_convert_file_to_verl_parquet_and_back(tmp_path):
    rows = [{"prompt": f"What is {i}+{i}?", "answer": str(2 * i)} for i in range(5)]
    src = write_jsonl(tmp_path / "rl.jsonl", rows)
    report = convert_file(src, tmp_path / "rl.parquet", "verl", data_source="arith", ability="math")
    assert (report.source_format, report.target_format, report.converted) == ("rl_prompt", "verl", 5)
    verl = read_parquet(tmp_path / "rl.parquet")
    assert verl[1] == {
        "data_source": "arith",
        "prompt": [{"role": "user", "content": "What is 1+1?"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "2"},
        "extra_info": {"index": 1},
    }
    convert_file(tmp_path / "rl.parquet", tmp_path / "back.parquet", "rl_prompt")
    convert_file(tmp_path / "back.parquet", tmp_path / "again.parquet", "verl")
    assert read_parquet(tmp_path / "again.parquet") == verl


def test_convert_file_sft_round_trip_through_files(tmp_path):
    rows = [{"messages": [USER, REPLY]}, {"messages": [SYSTEM, USER, REPLY, USER, REPLY]}]
    src = write_jsonl(tmp_path / "a.jsonl", rows)
    convert_file(src, tmp_path / "b.jsonl", "sharegpt")
    convert_file(tmp_path / "b.jsonl", tmp_path / "c.jsonl", "messages")
    assert read_jsonl(tmp_path / "c.jsonl") == rows

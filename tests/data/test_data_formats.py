"""Dataset row formats: detection, per-row validation with field paths, conversion, and loading files."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from training_platform.data.formats import (
    ALL_FORMATS,
    KIND_FORMATS,
    DatasetError,
    RowError,
    apply_field_map,
    detect_format,
    load_examples,
    read_rows,
    to_canonical,
    validate_row,
)

pytestmark = pytest.mark.unit

USER = {"role": "user", "content": "2+2="}
ASSISTANT = {"role": "assistant", "content": "4"}
CONV = [USER, ASSISTANT]


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def write_csv(path: Path, rows: list[dict]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_parquet(path: Path, rows: list[dict]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def load_error(path: Path, **kwargs) -> DatasetError:
    with pytest.raises(DatasetError) as info:
        load_examples(path, **kwargs)
    return info.value


# --------------------------------------------------------------------------------------------- detection


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        pytest.param({"messages": CONV}, "messages", id="messages"),
        pytest.param({"conversations": [{"from": "human", "value": "hi"}]}, "sharegpt", id="sharegpt"),
        pytest.param({"instruction": "Add.", "input": "2+2", "output": "4"}, "alpaca", id="alpaca"),
        pytest.param({"instruction": "Say hi.", "output": "hi"}, "alpaca", id="alpaca-no-input"),
        pytest.param({"prompt": "2+2=", "completion": "4"}, "prompt_completion", id="prompt-completion"),
        pytest.param({"text": "2+2=4"}, "text", id="text"),
        pytest.param({"prompt": "2+2=", "chosen": "4", "rejected": "5"}, "preference", id="preference"),
        pytest.param(
            {"chosen": CONV, "rejected": [USER, {"role": "assistant", "content": "5"}]},
            "preference",
            id="preference-implicit-prompt",
        ),
        pytest.param({"prompt": "2+2=", "completion": "4", "label": True}, "kto", id="kto"),
        pytest.param({"prompt": "2+2=", "answer": "4"}, "rl_prompt", id="rl-prompt"),
        pytest.param({"prompt": [USER]}, "rl_prompt", id="rl-prompt-messages"),
        pytest.param({"question": "2+2?", "solution": "4"}, None, id="unknown"),
        pytest.param({}, None, id="empty"),
    ],
)
def test_detect_format(row, expected):
    assert detect_format(row) == expected


def test_every_format_belongs_to_exactly_one_kind():
    kinds = [fmt for formats in KIND_FORMATS.values() for fmt in formats]
    assert sorted(kinds) == sorted(ALL_FORMATS)


# --------------------------------------------------------------------------------------------- validation

VALID_ROWS = [
    pytest.param("messages", {"messages": [{"role": "system", "content": "Be brief."}, *CONV]}, id="messages"),
    pytest.param(
        "sharegpt", {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}, id="sharegpt"
    ),
    pytest.param("alpaca", {"instruction": "Add.", "input": "2+2", "output": "4"}, id="alpaca"),
    pytest.param("alpaca", {"instruction": "Add.", "input": None, "output": "4"}, id="alpaca-null-input"),
    pytest.param("prompt_completion", {"prompt": "2+2=", "completion": "4"}, id="prompt-completion-strings"),
    pytest.param("prompt_completion", {"prompt": [USER], "completion": [ASSISTANT]}, id="prompt-completion-msgs"),
    pytest.param("text", {"text": "2+2=4"}, id="text"),
    pytest.param("preference", {"prompt": "2+2=", "chosen": "4", "rejected": "5"}, id="preference-strings"),
    pytest.param(
        "preference",
        {"prompt": [USER], "chosen": [ASSISTANT], "rejected": [{"role": "assistant", "content": "5"}]},
        id="preference-messages",
    ),
    pytest.param("kto", {"prompt": "2+2=", "completion": "5", "label": False}, id="kto"),
    pytest.param("rl_prompt", {"prompt": "2+2=", "answer": 4}, id="rl-prompt-number-answer"),
    pytest.param("rl_prompt", {"prompt": [USER]}, id="rl-prompt-no-answer"),
]


@pytest.mark.parametrize(("fmt", "row"), VALID_ROWS)
def test_valid_rows_have_no_errors(fmt, row):
    assert validate_row(fmt, row) == []


INVALID_ROWS = [
    pytest.param(
        "messages",
        {"messages": [{"role": "robot", "content": "hi"}, ASSISTANT]},
        "messages[0].role",
        "got 'robot'",
        id="messages-bad-role",
    ),
    pytest.param(
        "messages",
        {"messages": [USER, {"role": "assistant", "content": 4}]},
        "messages[1].content",
        "must be a string, got 4",
        id="messages-non-string-content",
    ),
    pytest.param(
        "messages",
        {"messages": [USER, {"role": "assistant"}]},
        "messages[1].content",
        "must be a string, got null",
        id="messages-missing-content",
    ),
    pytest.param(
        "messages",
        {"messages": [USER, "4"]},
        "messages[1]",
        "must be an object with role and content",
        id="messages-turn-not-object",
    ),
    pytest.param(
        "messages",
        {"messages": [{"role": "system", "content": "s"}, USER]},
        "messages",
        "has no assistant turn to learn from",
        id="messages-no-assistant",
    ),
    pytest.param(
        "messages", {"messages": []}, "messages", "must be a non-empty list of messages, got []", id="messages-empty"
    ),
    pytest.param(
        "messages", {"messages": "2+2=4"}, "messages", "must be a non-empty list of messages", id="messages-string"
    ),
    pytest.param(
        "sharegpt",
        {"conversations": [{"from": "alien", "value": "hi"}]},
        "conversations[0].from",
        "must be one of",
        id="sharegpt-bad-from",
    ),
    pytest.param(
        "sharegpt",
        {"conversations": [{"from": "human", "value": None}]},
        "conversations[0].value",
        "must be a string, got null",
        id="sharegpt-null-value",
    ),
    pytest.param("sharegpt", {"conversations": []}, "conversations", "must be a non-empty list", id="sharegpt-empty"),
    pytest.param(
        "alpaca",
        {"instruction": "Add.", "input": "2+2"},
        "output",
        "must be a non-empty string, got null",
        id="alpaca-missing-output",
    ),
    pytest.param(
        "alpaca",
        {"instruction": "  ", "output": "4"},
        "instruction",
        "must be a non-empty string",
        id="alpaca-blank-instruction",
    ),
    pytest.param(
        "alpaca",
        {"instruction": "Add.", "input": 22, "output": "4"},
        "input",
        "must be a string, got 22",
        id="alpaca-non-string-input",
    ),
    pytest.param(
        "prompt_completion",
        {"prompt": "2+2=", "completion": [ASSISTANT]},
        "completion",
        "prompt and completion must both be strings or both message lists",
        id="prompt-completion-mixed",
    ),
    pytest.param(
        "prompt_completion",
        {"prompt": "", "completion": "4"},
        "prompt",
        "must not be empty",
        id="prompt-completion-empty-prompt",
    ),
    pytest.param(
        "prompt_completion",
        {"prompt": "2+2=", "completion": 4},
        "completion",
        "must be a string or a list of messages, got 4",
        id="prompt-completion-int",
    ),
    pytest.param("text", {"text": ""}, "text", "must be a non-empty string", id="text-empty"),
    pytest.param("text", {"text": ["a"]}, "text", "must be a non-empty string, got ['a']", id="text-list"),
    pytest.param(
        "preference",
        {"prompt": "2+2=", "chosen": [ASSISTANT], "rejected": [ASSISTANT]},
        "rejected",
        "prompt, chosen and rejected must all be strings or all message lists",
        id="preference-mixed-prompt",
    ),
    pytest.param(
        "preference",
        {"chosen": "4", "rejected": [{"role": "assistant", "content": "5"}]},
        "rejected",
        "must all be strings or all message lists",
        id="preference-mixed-pair",
    ),
    pytest.param(
        "preference",
        {"prompt": "2+2=", "chosen": "4", "rejected": "4"},
        "rejected",
        "is identical to chosen",
        id="preference-chosen-equals-rejected",
    ),
    pytest.param(
        "preference",
        {"prompt": "2+2=", "chosen": "4"},
        "rejected",
        "must be a string or a list of messages, got null",
        id="preference-missing-rejected",
    ),
    pytest.param(
        "preference",
        {"prompt": [USER], "chosen": [{"role": "bot", "content": "4"}], "rejected": "5"},
        "chosen[0].role",
        "got 'bot'",
        id="preference-bad-role",
    ),
    pytest.param(
        "kto",
        {"prompt": "2+2=", "completion": "4", "label": "yes"},
        "label",
        "must be true or false, got 'yes'",
        id="kto-label-string",
    ),
    pytest.param(
        "kto",
        {"prompt": "2+2=", "completion": "4", "label": 1},
        "label",
        "must be true or false, got 1",
        id="kto-label-int",
    ),
    pytest.param(
        "kto", {"prompt": "2+2=", "completion": "4"}, "label", "must be true or false, got null", id="kto-label-missing"
    ),
    pytest.param(
        "rl_prompt",
        {"prompt": "2+2=", "answer": ["4"]},
        "answer",
        "must be a string or a number, got ['4']",
        id="rl-answer-list",
    ),
    pytest.param("rl_prompt", {"prompt": "  "}, "prompt", "must not be empty", id="rl-blank-prompt"),
    pytest.param("text", ["not", "an", "object"], "<row>", "must be an object", id="row-not-object"),
    pytest.param("nope", {"text": "x"}, "<row>", "unknown format 'nope'", id="unknown-format"),
]


@pytest.mark.parametrize(("fmt", "row", "field", "fragment"), INVALID_ROWS)
def test_invalid_row_reports_field_path(fmt, row, field, fragment):
    errors = validate_row(fmt, row)
    assert any(f == field and fragment in reason for f, reason in errors), errors


def test_sharegpt_without_assistant_turn_is_rejected():
    row = {"conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "hi"}]}
    assert validate_row("messages", to_canonical("sharegpt", row)) != []  # the same data as messages is rejected
    assert validate_row("sharegpt", row) != []


def test_every_bad_message_is_reported():
    row = {"messages": [{"role": "robot", "content": 1}, {"role": "assistant", "content": None}]}
    assert [f for f, _ in validate_row("messages", row)] == [
        "messages[0].role",
        "messages[0].content",
        "messages[1].content",
    ]


def test_long_values_are_shortened_in_reasons():
    ((field, reason),) = validate_row("text", {"text": ["x" * 500]})
    assert field == "text"
    assert reason.endswith("...") and len(reason) < 120


# --------------------------------------------------------------------------------------------- conversion


def test_alpaca_to_messages_with_input():
    row = {"instruction": "Add the two numbers.", "input": "2+2", "output": "4"}
    assert to_canonical("alpaca", row) == {
        "messages": [
            {"role": "user", "content": "Add the two numbers.\n\n2+2"},
            {"role": "assistant", "content": "4"},
        ]
    }


@pytest.mark.parametrize("input_value", [None, ""], ids=["null", "empty"])
def test_alpaca_to_messages_without_input(input_value):
    row = {"instruction": "Say hi.", "input": input_value, "output": "hi"}
    assert to_canonical("alpaca", row)["messages"][0] == {"role": "user", "content": "Say hi."}


def test_alpaca_system_becomes_first_message():
    row = {"instruction": "Say hi.", "output": "hi", "system": "Be nice."}
    assert [m["role"] for m in to_canonical("alpaca", row)["messages"]] == ["system", "user", "assistant"]


def test_sharegpt_to_messages_maps_roles():
    row = {
        "conversations": [
            {"from": "system", "value": "s"},
            {"from": "human", "value": "q"},
            {"from": "gpt", "value": "a"},
            {"from": "function_call", "value": "f"},
            {"from": "observation", "value": "o"},
            {"from": "user", "value": "q2"},
            {"from": "assistant", "value": "a2"},
        ]
    }
    assert to_canonical("sharegpt", row) == {
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "a"},
            {"role": "assistant", "content": "f"},
            {"role": "tool", "content": "o"},
            {"role": "user", "content": "q2"},
            {"role": "assistant", "content": "a2"},
        ]
    }


def test_messages_conversion_drops_extra_keys():
    row = {"messages": [{"role": "user", "content": "q", "name": "x"}, ASSISTANT], "id": 7}
    assert to_canonical("messages", row) == {"messages": [{"role": "user", "content": "q"}, ASSISTANT]}


def test_preference_conversion_keeps_optional_prompt_first():
    assert list(to_canonical("preference", {"rejected": "5", "chosen": "4", "prompt": "p", "x": 1})) == [
        "prompt",
        "chosen",
        "rejected",
    ]
    assert to_canonical("preference", {"chosen": "4", "rejected": "5"}) == {"chosen": "4", "rejected": "5"}


def test_kto_and_prompt_completion_conversion_keep_only_their_fields():
    assert to_canonical("kto", {"prompt": "p", "completion": "c", "label": True, "x": 1}) == {
        "prompt": "p",
        "completion": "c",
        "label": True,
    }
    assert to_canonical("prompt_completion", {"prompt": "p", "completion": "c", "x": 1}) == {
        "prompt": "p",
        "completion": "c",
    }


def test_rl_prompt_conversion_keeps_extra_columns_and_stringifies_answer():
    row = {"prompt": [USER], "answer": 4, "difficulty": "easy"}
    assert to_canonical("rl_prompt", row) == {"prompt": [USER], "answer": "4", "difficulty": "easy"}
    assert row["answer"] == 4  # the input row is not modified


def test_to_canonical_unknown_format():
    with pytest.raises(ValueError, match="unknown format 'nope'"):
        to_canonical("nope", {})


def test_apply_field_map_renames_canonical_from_source():
    row = {"question": "q", "solution": "s", "other": 1}
    assert apply_field_map(row, {"prompt": "question", "answer": "solution", "missing": "absent"}) == {
        "other": 1,
        "prompt": "q",
        "answer": "s",
    }
    assert row == {"question": "q", "solution": "s", "other": 1}
    assert apply_field_map(row, {}) is row


# --------------------------------------------------------------------------------------------- loading files

ALPACA_ROWS = [
    {"instruction": "Add.", "input": "2+2", "output": "4"},
    {"instruction": "Add.", "input": "3+4", "output": "7"},
    {"instruction": "Say hi.", "input": "", "output": "hi"},
]
ALPACA_CANONICAL = [
    {"messages": [{"role": "user", "content": "Add.\n\n2+2"}, {"role": "assistant", "content": "4"}]},
    {"messages": [{"role": "user", "content": "Add.\n\n3+4"}, {"role": "assistant", "content": "7"}]},
    {"messages": [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "hi"}]},
]


@pytest.mark.parametrize("suffix", ["jsonl", "json", "csv", "parquet"])
def test_load_examples_every_file_type(suffix, tmp_path):
    path = tmp_path / f"train.{suffix}"
    if suffix == "jsonl":
        write_jsonl(path, ALPACA_ROWS)
    elif suffix == "json":
        path.write_text(json.dumps(ALPACA_ROWS), encoding="utf-8")
    elif suffix == "csv":
        write_csv(path, ALPACA_ROWS)
    else:
        write_parquet(path, ALPACA_ROWS)
    assert load_examples(path, kind="sft") == (ALPACA_CANONICAL, "alpaca")


def test_load_examples_parquet_with_nested_messages(tmp_path):
    rows = [{"messages": CONV}, {"messages": [{"role": "system", "content": "s"}, *CONV]}]
    path = write_parquet(tmp_path / "chat.parquet", rows)
    assert load_examples(path, kind="sft") == (rows, "messages")


def test_load_examples_parquet_preference(tmp_path):
    rows = [{"prompt": "2+2=", "chosen": "4", "rejected": "5"}, {"prompt": "1+1=", "chosen": "2", "rejected": "3"}]
    path = write_parquet(tmp_path / "pref.parquet", rows)
    assert load_examples(path, kind="preference") == (rows, "preference")


def test_load_examples_explicit_format(tmp_path):
    path = write_jsonl(tmp_path / "pc.jsonl", [{"prompt": "2+2=", "completion": "4"}])
    assert load_examples(path, kind="sft", fmt="prompt_completion") == (
        [{"prompt": "2+2=", "completion": "4"}],
        "prompt_completion",
    )


def test_load_examples_field_map_renames_columns(tmp_path):
    path = write_jsonl(
        tmp_path / "gsm.jsonl",
        [
            {"question": "What is 2+2?", "solution": "#### 4", "id": 1},
            {"question": "What is 3+3?", "solution": 6, "id": 2},
        ],
    )
    rows, fmt = load_examples(path, kind="rl", field_map={"prompt": "question", "answer": "solution"})
    assert fmt == "rl_prompt"
    assert rows == [
        {"id": 1, "prompt": "What is 2+2?", "answer": "#### 4"},
        {"id": 2, "prompt": "What is 3+3?", "answer": "6"},
    ]


def test_load_examples_field_map_for_csv(tmp_path):
    path = write_csv(tmp_path / "qa.csv", [{"q": "Say hi.", "a": "hi"}])
    rows, fmt = load_examples(path, kind="sft", field_map={"prompt": "q", "completion": "a"})
    assert (rows, fmt) == ([{"prompt": "Say hi.", "completion": "hi"}], "prompt_completion")


def test_load_examples_without_field_map_cannot_detect(tmp_path):
    path = write_jsonl(tmp_path / "gsm.jsonl", [{"question": "q", "solution": "s"}])
    err = load_error(path, kind="rl")
    assert err.rows == [
        RowError(
            1,
            "<row>",
            "cannot detect the format from the fields ['question', 'solution']; set data.format or data.field_map",
        )
    ]


@pytest.mark.parametrize(
    ("kind", "fmt", "message"),
    [
        pytest.param(
            "preference",
            "auto",
            "format 'messages' cannot train this algorithm; it needs preference",
            id="detected-messages-for-preference",
        ),
        pytest.param(
            "rl",
            "auto",
            "format 'messages' cannot train this algorithm; it needs rl_prompt",
            id="detected-messages-for-rl",
        ),
        pytest.param(
            "sft",
            "kto",
            "format 'kto' cannot train this algorithm; it needs messages or sharegpt or alpaca "
            "or prompt_completion or text",
            id="explicit-kto-for-sft",
        ),
    ],
)
def test_load_examples_kind_format_mismatch(kind, fmt, message, tmp_path):
    path = write_jsonl(tmp_path / "chat.jsonl", [{"messages": CONV}])
    err = load_error(path, kind=kind, fmt=fmt)
    assert err.rows == [RowError(1, "<row>", message)]


def test_load_examples_mismatch_reported_at_first_non_blank_line(tmp_path):
    path = tmp_path / "pref.jsonl"
    path.write_text("\n\n" + json.dumps({"prompt": "p", "chosen": "a", "rejected": "b"}) + "\n", encoding="utf-8")
    assert load_error(path, kind="sft").rows[0].line == 3


def test_jsonl_line_numbers_are_1_based_and_count_blank_lines(tmp_path):
    good = json.dumps({"messages": CONV})
    bad1 = json.dumps({"messages": [USER]})  # no assistant turn
    bad2 = json.dumps({"messages": [USER, {"role": "assistant", "content": 4}]})
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join([good, "", bad1, "   ", "", good, bad2]) + "\n", encoding="utf-8")
    err = load_error(path, kind="sft")
    assert err.rows == [
        RowError(3, "messages", "has no assistant turn to learn from"),
        RowError(7, "messages[1].content", "must be a string, got 4"),
    ]
    assert err.total_bad == 2
    assert str(err) == (
        "line 3: messages: has no assistant turn to learn from\nline 7: messages[1].content: must be a string, got 4"
    )


def test_jsonl_invalid_json_line_number(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps({"messages": CONV}) + '\n\n{"messages": [\n', encoding="utf-8")
    err = load_error(path, kind="sft")
    assert len(err.rows) == 1
    assert (err.rows[0].line, err.rows[0].field) == (3, "<row>")
    assert err.rows[0].reason.startswith("invalid JSON: ")


def test_json_records_are_numbered_from_1(tmp_path):
    path = tmp_path / "train.json"
    path.write_text(json.dumps([{"text": "a"}, {"text": "b"}, {"text": ""}]), encoding="utf-8")
    assert load_error(path, kind="sft").rows == [RowError(3, "text", "must be a non-empty string, got ''")]


def test_json_must_be_a_list(tmp_path):
    path = tmp_path / "train.json"
    path.write_text(json.dumps({"text": "a"}), encoding="utf-8")
    assert load_error(path, kind="sft").rows == [RowError(1, "<file>", "a .json dataset must be a list of objects")]


def test_json_invalid_reports_line(tmp_path):
    path = tmp_path / "train.json"
    path.write_text('[\n{"text": "a"},\n{"text": }\n]', encoding="utf-8")
    err = load_error(path, kind="sft")
    assert (err.rows[0].line, err.rows[0].field) == (3, "<file>")
    assert err.rows[0].reason.startswith("invalid JSON: ")


def test_csv_records_are_numbered_from_1_after_the_header(tmp_path):
    path = write_csv(
        tmp_path / "train.csv",
        [
            {"instruction": "Add.", "output": "4"},
            {"instruction": "Add.", "output": ""},
        ],
    )
    assert load_error(path, kind="sft").rows == [RowError(2, "output", "must be a non-empty string, got ''")]


def test_parquet_records_are_numbered_from_1(tmp_path):
    path = write_parquet(
        tmp_path / "kto.parquet",
        [
            {"prompt": "p", "completion": "c", "label": True},
            {"prompt": "p", "completion": "c", "label": None},
        ],
    )
    assert load_error(path, kind="kto").rows == [RowError(2, "label", "must be true or false, got null")]


def test_non_object_row_in_jsonl(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps({"text": "a"}) + "\n[1, 2]\n", encoding="utf-8")
    assert load_error(path, kind="sft").rows == [RowError(2, "<row>", "must be an object, got [1, 2]")]


def test_total_bad_counts_rows_beyond_max_errors(tmp_path):
    good = {"messages": CONV}
    bad = {"messages": [USER]}
    path = write_jsonl(tmp_path / "train.jsonl", [good, bad, bad, good, bad, bad, bad])
    err = load_error(path, kind="sft", max_errors=2)
    assert [e.line for e in err.rows] == [2, 3]
    assert err.total_bad == 5


def test_max_errors_caps_field_errors_not_rows(tmp_path):
    bad = {"messages": [{"role": "x", "content": 1}, ASSISTANT]}  # 2 problems per row
    path = write_jsonl(tmp_path / "train.jsonl", [bad] * 4)
    err = load_error(path, kind="sft", max_errors=3)
    assert [(e.line, e.field) for e in err.rows] == [
        (1, "messages[0].role"),
        (1, "messages[0].content"),
        (2, "messages[0].role"),
    ]
    assert err.total_bad == 4


def test_default_max_errors_is_20(tmp_path):
    path = write_jsonl(tmp_path / "train.jsonl", [{"text": ""}] * 30)
    err = load_error(path, kind="sft")
    assert len(err.rows) == 20
    assert err.total_bad == 30


def test_bad_rows_are_never_silently_dropped(tmp_path):
    path = write_jsonl(tmp_path / "train.jsonl", [{"text": "ok"}] * 50 + [{"text": 5}])
    err = load_error(path, kind="sft")
    assert err.rows == [RowError(51, "text", "must be a non-empty string, got 5")]


def test_limit_stops_after_n_good_rows(tmp_path):
    path = write_jsonl(tmp_path / "train.jsonl", [{"text": str(i)} for i in range(10)])
    rows, fmt = load_examples(path, kind="sft", limit=3)
    assert (rows, fmt) == ([{"text": "0"}, {"text": "1"}, {"text": "2"}], "text")


def test_format_is_fixed_by_the_first_row(tmp_path):
    path = write_jsonl(tmp_path / "train.jsonl", [{"text": "a"}, {"messages": CONV}])
    assert load_error(path, kind="sft").rows == [RowError(2, "text", "must be a non-empty string, got null")]


@pytest.mark.parametrize("content", ["", "\n\n  \n"], ids=["empty", "blank-lines"])
def test_empty_file_has_no_rows(content, tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text(content, encoding="utf-8")
    assert load_error(path, kind="sft").rows == [RowError(0, "<file>", "the file has no rows")]


def test_unsupported_file_type(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("hello\n", encoding="utf-8")
    err = load_error(path, kind="sft")
    assert err.rows[0].field == "<file>"
    assert "unsupported file type '.txt'" in err.rows[0].reason


def test_read_rows_yields_line_numbers(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 1}\n\n{"a": 2}\n', encoding="utf-8")
    assert list(read_rows(path)) == [(1, {"a": 1}), (3, {"a": 2})]


def test_row_error_and_dataset_error_str():
    errors = [RowError(4, "label", "must be true or false, got 'x'"), RowError(9, "<row>", "invalid JSON: boom")]
    err = DatasetError(errors, total_bad=12)
    assert str(errors[0]) == "line 4: label: must be true or false, got 'x'"
    assert str(err) == "line 4: label: must be true or false, got 'x'\nline 9: <row>: invalid JSON: boom"
    assert err.total_bad == 12
    assert DatasetError(errors).total_bad == 2

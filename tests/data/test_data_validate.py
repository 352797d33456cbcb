"""Validation per format (good and bad rows, reported with line, field and reason), the verl schema, and ingestion
under the reject / quarantine policies with atomic writes."""

from __future__ import annotations

import json

import pytest
from data_helpers import CONV, USER, leftovers, read_jsonl, write_csv, write_jsonl, write_parquet

from training_platform.core.files import atomic_outputs
from training_platform.data.formats import (
    DATA_FORMATS,
    DatasetError,
    RowError,
    detect_format,
    load_examples,
    to_canonical,
    validate_row,
)
from training_platform.data.io import RowWriter, iter_records, write_rows
from training_platform.data.validate import ingest_file, validate_file

pytestmark = pytest.mark.unit

VERL = {
    "data_source": "openai/gsm8k",
    "prompt": [USER],
    "ability": "math",
    "reward_model": {"style": "rule", "ground_truth": "4"},
    "extra_info": {"split": "train", "index": 0},
}

# format -> (good row, bad row, expected (field, reason prefix) of the bad row)
CASES = {
    "messages": (
        {"messages": CONV},
        {"messages": [USER, {"role": "assistant", "content": 4}]},
        ("messages[1].content", "must be a string, got 4"),
    ),
    "sharegpt": (
        {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]},
        {"conversations": [{"from": "human", "value": "hi"}]},
        ("conversations", "has no assistant (gpt) turn to learn from"),
    ),
    "alpaca": (
        {"instruction": "Add.", "input": "2+2", "output": "4"},
        {"instruction": "Add.", "output": ""},
        ("output", "must be a non-empty string, got ''"),
    ),
    "prompt_completion": (
        {"prompt": "2+2=", "completion": "4"},
        {"prompt": "2+2=", "completion": ["4"]},
        ("completion[0]", "must be an object with role and content, got '4'"),
    ),
    "text": ({"text": "hello"}, {"text": "  "}, ("text", "must be a non-empty string, got '  '")),
    "preference": (
        {"prompt": "2+2=", "chosen": "4", "rejected": "5"},
        {"prompt": "2+2=", "chosen": "4", "rejected": "4"},
        ("rejected", "is identical to chosen"),
    ),
    "kto": (
        {"prompt": "2+2=", "completion": "4", "label": True},
        {"prompt": "2+2=", "completion": "4", "label": "x"},
        ("label", "must be true or false, got 'x'"),
    ),
    "rl_prompt": ({"prompt": "2+2=", "answer": "4"}, {"prompt": "", "answer": "4"}, ("prompt", "must not be empty")),
    "verl": (
        VERL,
        {**VERL, "reward_model": {"style": "rule"}},
        ("reward_model.ground_truth", "must be a string or a number, got null"),
    ),
}


def test_every_data_format_has_a_case():
    assert sorted(CASES) == sorted(DATA_FORMATS)


@pytest.mark.parametrize("fmt", sorted(CASES))
def test_good_and_bad_rows_per_format(fmt, tmp_path):
    good, bad, (field, reason) = CASES[fmt]
    assert detect_format(good) == fmt
    assert validate_row(fmt, good) == []
    path = write_jsonl(tmp_path / f"{fmt}.jsonl", [good, good, bad, good])
    report = validate_file(path)
    assert report.format == fmt
    assert (report.rows, report.valid_rows) == (4, 3)
    assert [(b.index, b.line) for b in report.bad_rows] == [(2, 3)]
    first = report.bad_rows[0].first
    assert (first.line, first.field) == (3, field)
    assert first.reason.startswith(reason)
    assert report.lines() == [str(first)]


def test_conversational_preference_is_valid_and_mixed_kinds_are_not():
    conv = {
        "prompt": [USER],
        "chosen": [{"role": "assistant", "content": "4"}],
        "rejected": [{"role": "assistant", "content": "5"}],
    }
    assert validate_row("preference", conv) == []
    mixed = {**conv, "rejected": "5"}
    assert validate_row("preference", mixed) == [
        ("rejected", "prompt, chosen and rejected must all be strings or all message lists")
    ]


def test_verl_validation_reports_each_field():
    row = {"data_source": "", "prompt": "2+2", "ability": 3, "reward_model": {"ground_truth": True}, "extra_info": []}
    assert [f for f, _ in validate_row("verl", row)] == [
        "data_source",
        "prompt",
        "ability",
        "reward_model.ground_truth",
        "extra_info",
    ]


def test_verl_loads_as_rl_training_data(tmp_path):
    path = write_jsonl(tmp_path / "train.jsonl", [VERL, {**VERL, "reward_model": {"style": "rule", "ground_truth": 7}}])
    rows, fmt = load_examples(path, kind="rl")
    assert fmt == "verl"
    assert rows[0] == {
        "prompt": [USER],
        "answer": "4",
        "data_source": "openai/gsm8k",
        "ability": "math",
        "extra_info": {"split": "train", "index": 0},
    }
    assert rows[1]["answer"] == "7"
    assert to_canonical("verl", VERL)["answer"] == "4"
    with pytest.raises(DatasetError, match="format 'verl' cannot train this algorithm"):
        load_examples(path, kind="sft")


def test_line_numbers_count_blank_lines_and_invalid_json_does_not_stop_validation(tmp_path):
    good = json.dumps({"messages": CONV})
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join([good, "", "{not json", good, json.dumps({"messages": [USER]})]) + "\n")
    report = validate_file(path)
    assert report.lines() == [
        "line 3: <row>: invalid JSON: Expecting property name enclosed in double quotes",
        "line 5: messages: has no assistant turn to learn from",
    ]
    assert [b.index for b in report.bad_rows] == [1, 3]  # 0-based over rows, blank lines not counted


@pytest.mark.parametrize("kind", ["csv", "parquet", "json"])
def test_record_numbers_for_other_file_types(kind, tmp_path):
    rows = [{"instruction": "Add.", "output": "4"}, {"instruction": "Add.", "output": ""}]
    path = tmp_path / f"train.{kind}"
    if kind == "csv":
        write_csv(path, rows)
    elif kind == "parquet":
        write_parquet(path, rows)
    else:
        path.write_text(json.dumps(rows))
    assert validate_file(path).lines() == ["line 2: output: must be a non-empty string, got ''"]


def test_explicit_format_and_undetectable_rows(tmp_path):
    path = write_jsonl(tmp_path / "qa.jsonl", [{"question": "q", "solution": "s"}])
    report = validate_file(path)
    assert report.format is None
    assert report.lines() == [
        "line 1: <row>: cannot detect the format from the fields ['question', 'solution']; pass the format explicitly"
    ]
    assert validate_file(path, fmt="text").lines() == ["line 1: text: must be a non-empty string, got null"]
    with pytest.raises(ValueError, match="unknown format 'nope'"):
        validate_file(path, fmt="nope")


def test_empty_file(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("\n\n")
    report = validate_file(path)
    assert not report.ok
    assert report.lines() == ["line 0: <file>: the file has no rows"]


# ---------------------------------------------------------------------------------------------- policies


def _mixed(tmp_path):
    good = {"messages": CONV}
    return write_jsonl(tmp_path / "upload.jsonl", [good, {"messages": [USER]}, good, {"messages": "x"}])


def test_reject_policy_stores_nothing(tmp_path):
    dest = tmp_path / "store" / "ds.jsonl"
    report = ingest_file(_mixed(tmp_path), dest, policy="reject")
    assert report.accepted is False
    assert [b.line for b in report.bad_rows] == [2, 4]
    assert not (tmp_path / "store").exists()


def test_reject_policy_stores_a_clean_file(tmp_path):
    src = write_jsonl(tmp_path / "upload.jsonl", [{"text": "a"}, {"text": "b"}])
    report = ingest_file(src, tmp_path / "ds.parquet", policy="reject")
    assert report.accepted and report.output == str(tmp_path / "ds.parquet")
    from data_helpers import read_parquet

    assert read_parquet(tmp_path / "ds.parquet") == [{"text": "a"}, {"text": "b"}]


def test_quarantine_policy_keeps_bad_rows_aside(tmp_path):
    src = _mixed(tmp_path)
    (tmp_path / "upload.jsonl").write_text(src.read_text() + "{broken\n")
    dest = tmp_path / "ds.jsonl"
    report = ingest_file(src, dest, policy="quarantine")
    assert report.accepted is True
    assert read_jsonl(dest) == [{"messages": CONV}, {"messages": CONV}]
    quarantined = read_jsonl(tmp_path / "ds.quarantine.jsonl")
    assert [(q["index"], q["line"]) for q in quarantined] == [(1, 2), (3, 4), (4, 5)]
    assert quarantined[0]["errors"] == [
        {"line": 2, "field": "messages", "reason": "has no assistant turn to learn from"}
    ]
    assert quarantined[0]["row"] == {"messages": [USER]}
    assert quarantined[2]["row"] is None and quarantined[2]["raw"] == "{broken"
    assert report.quarantine == str(tmp_path / "ds.quarantine.jsonl")
    assert report.to_dict()["bad_row_count"] == 3


def test_quarantine_of_an_undetectable_file_stores_nothing(tmp_path):
    src = write_jsonl(tmp_path / "up.jsonl", [{"question": "q"}])
    report = ingest_file(src, tmp_path / "ds.jsonl", policy="quarantine")
    assert report.accepted is False
    assert sorted(p.name for p in tmp_path.iterdir()) == ["up.jsonl"]


# ---------------------------------------------------------------------------------------------- atomic writes


def test_writer_failure_leaves_nothing(tmp_path):
    target = tmp_path / "out.jsonl"
    rows = [{"text": "a"}, {"text": object()}]  # the second row cannot be serialised
    with pytest.raises(TypeError):
        write_rows(target, rows)
    assert list(tmp_path.iterdir()) == []


def test_exception_mid_stream_keeps_the_previous_version(tmp_path):
    target = write_jsonl(tmp_path / "out.jsonl", [{"text": "old"}])
    with pytest.raises(RuntimeError), RowWriter(target) as writer:
        writer.write({"text": "new"})
        raise RuntimeError("crash")
    assert read_jsonl(target) == [{"text": "old"}]
    assert leftovers(tmp_path) == []


def test_parquet_schema_mismatch_is_a_dataset_error_and_leaves_nothing(tmp_path):
    target = tmp_path / "out.parquet"
    with pytest.raises(DatasetError) as info, RowWriter(target, parquet_batch_rows=2) as writer:
        for row in [{"a": 1}, {"a": 2}, {"a": "three"}, {"a": "four"}]:
            writer.write(row)
    assert info.value.rows[0].line == 3
    assert list(tmp_path.iterdir()) == []


def test_atomic_outputs_commit_together(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    with pytest.raises(ValueError), atomic_outputs(a, b) as (ta, tb):
        ta.write_text("x")
        tb.write_text("y")
        raise ValueError("boom")
    assert list(tmp_path.iterdir()) == []
    with atomic_outputs(a, b) as (ta, tb):
        ta.write_text("x")
        tb.write_text("y")
    assert (a.read_text(), b.read_text()) == ("x", "y")


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv", ".parquet"])
def test_every_output_type_round_trips(suffix, tmp_path):
    rows = [{"prompt": "2+2=", "completion": "4"}, {"prompt": "1+1=", "completion": "2"}]
    path = tmp_path / f"out{suffix}"
    assert write_rows(path, rows) == 2
    assert [r.row for r in iter_records(path)] == rows


def test_unsupported_types(tmp_path):
    with pytest.raises(DatasetError) as info:
        list(iter_records(tmp_path / "x.txt"))
    assert info.value.rows[0] == RowError(
        0, "<file>", "unsupported file type '.txt'; use one of .jsonl, .json, .parquet, .csv"
    )
    with pytest.raises(DatasetError, match="unsupported output type"):
        RowWriter(tmp_path / "x.txt")

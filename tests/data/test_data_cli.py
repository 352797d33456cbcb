"""The `tp data` CLI contract: output lines, report keys and exit codes (0 ok, 2 bad input, 1 unexpected)."""

from __future__ import annotations

import json

import pytest
import yaml
from data_helpers import CONV, USER, read_jsonl, write_jsonl
from synthetic_corpus import pairwise_scores, planted_corpus

pytestmark = pytest.mark.unit


# ---------------------------------------------------------------------------------------------- validate


def test_validate_ok_prints_the_format_and_exits_0(cli, tmp_path):
    src = write_jsonl(tmp_path / "chat.jsonl", [{"messages": CONV}] * 3)
    result = cli("validate", src)
    assert result.exit_code == 0, result
    assert result.stdout == "messages\n"


def test_validate_bad_rows_one_line_each_and_exit_2(cli, tmp_path):
    src = tmp_path / "chat.jsonl"
    src.write_text(
        "\n".join(
            [
                json.dumps({"messages": CONV}),
                json.dumps({"messages": [USER]}),
                "",
                "{oops",
                json.dumps({"messages": [{"role": "robot", "content": 1}, CONV[1]]}),  # two problems, one line
            ]
        )
        + "\n"
    )
    result = cli("validate", src)
    assert result.exit_code == 2, result
    assert result.stdout.splitlines() == [
        "messages",
        "line 2: messages: has no assistant turn to learn from",
        "line 4: <row>: invalid JSON: Expecting property name enclosed in double quotes",
        "line 5: messages[0].role: must be one of ['assistant', 'system', 'tool', 'user'], got 'robot'",
    ]
    assert "3 bad row(s) of 4" in result.stderr


def test_validate_explicit_format(cli, tmp_path):
    src = write_jsonl(tmp_path / "pc.jsonl", [{"prompt": "2+2=", "completion": "4"}])
    assert cli("validate", src, "--format", "prompt_completion").stdout == "prompt_completion\n"
    result = cli("validate", src, "--format", "kto")
    assert result.exit_code == 2
    assert result.stdout.splitlines() == ["kto", "line 1: label: must be true or false, got null"]
    bad = cli("validate", src, "--format", "nope")
    assert bad.exit_code == 2 and "--format: unknown format 'nope'" in bad.stderr


@pytest.mark.parametrize("suffix", ["parquet", "csv", "json"])
def test_validate_other_file_types(cli, tmp_path, suffix):
    from data_helpers import write_csv, write_parquet

    rows = [{"prompt": "2+2=", "chosen": "4", "rejected": "5"}, {"prompt": "1+1=", "chosen": "2", "rejected": "2"}]
    path = tmp_path / f"pref.{suffix}"
    if suffix == "parquet":
        write_parquet(path, rows)
    elif suffix == "csv":
        write_csv(path, rows)
    else:
        path.write_text(json.dumps(rows))
    result = cli("validate", path)
    assert result.exit_code == 2
    assert result.stdout.splitlines() == ["preference", "line 2: rejected: is identical to chosen"]


def test_validate_file_problems(cli, tmp_path):
    missing = cli("validate", tmp_path / "missing.jsonl")
    assert missing.exit_code == 2
    assert missing.stdout == f"line 0: <file>: no such file: {tmp_path / 'missing.jsonl'}\n"
    (tmp_path / "empty.jsonl").write_text("")
    empty = cli("validate", tmp_path / "empty.jsonl")
    assert (empty.exit_code, empty.stdout) == (2, "line 0: <file>: the file has no rows\n")
    (tmp_path / "x.txt").write_text("hi")
    assert cli("validate", tmp_path / "x.txt").exit_code == 2


def test_validate_with_output_and_quarantine(cli, tmp_path):
    src = write_jsonl(tmp_path / "up.jsonl", [{"text": "a"}, {"text": ""}, {"text": "b"}])
    rejected = cli("validate", src, "--output", tmp_path / "ds.jsonl")
    assert rejected.exit_code == 2 and not (tmp_path / "ds.jsonl").exists()
    assert "rejected: nothing stored" in rejected.stderr
    kept = cli(
        "validate", src, "--output", tmp_path / "ds.jsonl", "--policy", "quarantine", "--report", tmp_path / "v.json"
    )
    assert kept.exit_code == 2  # still not every row is valid
    assert read_jsonl(tmp_path / "ds.jsonl") == [{"text": "a"}, {"text": "b"}]
    assert [q["line"] for q in read_jsonl(tmp_path / "ds.quarantine.jsonl")] == [2]
    assert json.loads((tmp_path / "v.json").read_text())["bad_row_count"] == 1


# ---------------------------------------------------------------------------------------------- convert / clean


def test_convert(cli, tmp_path):
    src = write_jsonl(tmp_path / "a.jsonl", [{"instruction": "Say hi.", "input": "", "output": "hi"}])
    result = cli("convert", src, "--to", "messages", "--output", tmp_path / "m.jsonl")
    assert result.exit_code == 0, result
    assert "converted 1 rows: alpaca -> messages" in result.stdout
    assert read_jsonl(tmp_path / "m.jsonl") == [
        {"messages": [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "hi"}]}
    ]
    back = cli("convert", tmp_path / "m.jsonl", "--to", "alpaca", "--output", tmp_path / "a2.jsonl")
    assert back.exit_code == 0 and read_jsonl(tmp_path / "a2.jsonl") == read_jsonl(src)


def test_convert_errors(cli, tmp_path):
    src = write_jsonl(tmp_path / "m.jsonl", [{"messages": CONV}, {"messages": CONV + CONV}])
    result = cli("convert", src, "--to", "alpaca", "--output", tmp_path / "a.jsonl")
    assert result.exit_code == 2
    assert result.stderr.startswith("line 2: messages: alpaca holds one user turn")
    assert not (tmp_path / "a.jsonl").exists()
    assert cli("convert", src, "--to", "kto", "--output", tmp_path / "k.jsonl").exit_code == 2
    assert cli("convert", src, "--to", "verl", "--output", tmp_path / "v.parquet").exit_code == 2
    assert cli("convert", tmp_path / "nope.jsonl", "--to", "messages", "--output", tmp_path / "o.jsonl").exit_code == 2


def test_clean(cli, tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", [{"text": "Contact me at a@b.com today please"}, {"text": "hi"}])
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        yaml.safe_dump({"operators": [{"op": "redact_pii"}, {"op": "length_filter", "unit": "words", "min": 2}]})
    )
    result = cli("clean", src, "--recipe", recipe, "--output", tmp_path / "out.jsonl", "--report", tmp_path / "r.json")
    assert result.exit_code == 0, result
    assert read_jsonl(tmp_path / "out.jsonl") == [{"text": "Contact me at <EMAIL> today please"}]
    report = json.loads((tmp_path / "r.json").read_text())
    assert [(o["op"], o["kept"], o["removed"]) for o in report["operators"]] == [
        ("redact_pii", 2, 0),
        ("length_filter", 1, 1),
    ]
    assert report["operators"][1]["samples_removed"][0]["row"] == {"text": "hi"}


def test_clean_bad_recipe_exit_2(cli, tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", [{"text": "x"}])
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"operators": [{"op": "length_filter", "unit": "lines", "min": 1}]}))
    result = cli("clean", src, "--recipe", recipe, "--output", tmp_path / "o.jsonl", "--report", tmp_path / "r.json")
    assert result.exit_code == 2
    assert result.stderr == "recipe: operators[0].unit: must be one of 'chars', 'words' or 'tokens', got 'lines'\n"
    assert not (tmp_path / "o.jsonl").exists() and not (tmp_path / "r.json").exists()


# ---------------------------------------------------------------------------------------------- dedup


def test_dedup_contract_on_planted_duplicates(cli, tmp_path):
    corpus = planted_corpus(1500, seed=11)
    src = write_jsonl(tmp_path / "corpus.jsonl", [{"text": t} for t in corpus.texts])
    result = cli(
        "dedup",
        src,
        "--output",
        tmp_path / "out.jsonl",
        "--report",
        tmp_path / "r.json",
        "--threshold",
        "0.8",
        "--num-perm",
        "128",
        "--ngram",
        "5",
    )
    assert result.exit_code == 0, result
    report = json.loads((tmp_path / "r.json").read_text())
    assert {"input_rows", "output_rows", "exact_duplicates", "near_duplicates", "clusters"} <= set(report)
    assert report["input_rows"] == 1500
    assert report["output_rows"] == report["input_rows"] - report["exact_duplicates"] - report["near_duplicates"]
    assert len(read_jsonl(tmp_path / "out.jsonl")) == report["output_rows"]
    clusters = report["clusters"]
    assert all(
        isinstance(c, list) and len(c) >= 2 and all(isinstance(i, int) and 0 <= i < 1500 for i in c) for c in clusters
    )
    assert sum(len(c) - 1 for c in clusters) == report["exact_duplicates"] + report["near_duplicates"]
    scores = pairwise_scores(clusters, corpus)
    assert scores["recall"] >= 0.95 and scores["precision"] >= 0.95, scores


def test_dedup_bad_arguments(cli, tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", [{"text": "x"}])
    out = ("--output", tmp_path / "o.jsonl", "--report", tmp_path / "r.json")
    for args in (
        ("--threshold", "1.5"),
        ("--num-perm", "1"),
        ("--bands", "3"),
        ("--keep", "last"),
        ("--bands", "50", "--rows", "50"),
    ):
        result = cli("dedup", src, *out, *args)
        assert result.exit_code == 2, (args, result)
        assert result.stderr.startswith("--"), result
    assert not (tmp_path / "o.jsonl").exists()


# ---------------------------------------------------------------------------------------------- score / report


def test_score_heuristics_and_top_k(cli, tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", [{"text": "$$$ ###"}, {"text": "A clear, useful sentence about data."}])
    result = cli(
        "score",
        src,
        "--output",
        tmp_path / "o.jsonl",
        "--report",
        tmp_path / "r.json",
        "--by",
        "quality",
        "--top-k",
        "1",
    )
    assert result.exit_code == 0, result
    assert [r["text"] for r in read_jsonl(tmp_path / "o.jsonl")] == ["A clear, useful sentence about data."]
    assert json.loads((tmp_path / "r.json").read_text())["filter"]["output_rows"] == 1
    assert cli("score", src, "--output", tmp_path / "o.jsonl", "--min", "0.5").exit_code == 2  # --by missing
    judge = tmp_path / "judge.yaml"
    judge.write_text(yaml.safe_dump({"endpoint": "judge", "model": "m", "colour": 1}))
    bad = cli("score", src, "--output", tmp_path / "o.jsonl", "--judge", judge)
    assert bad.exit_code == 2 and "colour: unknown field" in bad.stderr
    judge.write_text(yaml.safe_dump({"base_url": "http://localhost:9/v1", "model": "m"}))
    bad = cli("score", src, "--output", tmp_path / "o.jsonl", "--judge", judge)
    assert bad.exit_code == 2 and "`base_url` is not accepted" in bad.stderr
    judge.write_text(yaml.safe_dump({"endpoint": "judge", "model": "m"}))  # TP_ENDPOINTS does not define it
    bad = cli("score", src, "--output", tmp_path / "o.jsonl", "--judge", judge)
    assert bad.exit_code == 2 and "unknown endpoint 'judge'" in bad.stderr


def test_report_contract_with_eval_sets(cli, tmp_path):
    eval_rows = [
        {
            "question": f"Question number {i}: compute the total weight of {i} boxes of apples and pears "
            f"carried by the farmer to the market",
            "answer": str(i),
        }
        for i in range(20)
    ]
    eval_path = write_jsonl(tmp_path / "eval.jsonl", eval_rows)
    train = [
        {"prompt": f"Write a short poem about the color number {i} and the sea at night", "completion": "ok"}
        for i in range(30)
    ]
    train[4]["prompt"] = eval_rows[7]["question"]
    train[19]["completion"] = "Recall: " + eval_rows[2]["question"]
    src = write_jsonl(tmp_path / "train.jsonl", train)
    result = cli("report", src, "--output", tmp_path / "rep.json", "--eval-set", eval_path)
    assert result.exit_code == 0, result
    report = json.loads((tmp_path / "rep.json").read_text())
    assert report["contaminated_rows"] == [4, 19]
    for key in ("stats", "distinct_1", "distinct_2", "difficulty", "difficulty_buckets", "duplicate_rate"):
        assert key in report, key
    assert set(report["difficulty_buckets"]) == {"easy", "medium", "hard"}
    no_eval = cli("report", src, "--output", tmp_path / "rep2.json", "--no-dedup")
    assert no_eval.exit_code == 0 and "contaminated_rows" not in json.loads((tmp_path / "rep2.json").read_text())
    missing = cli("report", src, "--output", tmp_path / "rep3.json", "--eval-set", tmp_path / "nope.jsonl")
    assert missing.exit_code == 2 and "--eval-set: no such file" in missing.stderr


def test_decontaminate_and_resample_commands(cli, tmp_path):
    eval_path = write_jsonl(
        tmp_path / "eval.jsonl", [{"text": "the quick brown fox jumps over the lazy dog near the river bank at dawn"}]
    )
    src = write_jsonl(
        tmp_path / "train.jsonl",
        [
            {"text": "the quick brown fox jumps over the lazy dog near the river bank at dawn again"},
            {"text": "something else"},
        ],
    )
    result = cli("decontaminate", src, "--eval-set", eval_path, "--output", tmp_path / "clean.jsonl")
    assert result.exit_code == 0, result
    assert read_jsonl(tmp_path / "clean.jsonl") == [{"text": "something else"}]
    resample = cli("resample", src, "--mix", "easy=0.5,medium=0.5", "--output", tmp_path / "mix.jsonl")
    assert resample.exit_code == 0, resample
    assert cli("resample", src, "--mix", "easy", "--output", tmp_path / "m.jsonl").exit_code == 2


def test_unexpected_failures_exit_1(cli, tmp_path, monkeypatch):
    import training_platform.data.dedup as dedup

    def boom(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(dedup, "dedup_file", boom)
    src = write_jsonl(tmp_path / "in.jsonl", [{"text": "x"}])
    result = cli("dedup", src, "--output", tmp_path / "o.jsonl", "--report", tmp_path / "r.json")
    assert result.exit_code == 1
    assert result.stderr == "FATAL: RuntimeError: disk on fire\n"

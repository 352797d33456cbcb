"""Cleaning operators (each one), recipe validation, and the clean report."""

from __future__ import annotations

import json

import pytest
import yaml
from data_helpers import USER, read_jsonl, write_jsonl

from training_platform.data.clean import RecipeError, clean_file, load_recipe, parse_recipe
from training_platform.data.operators import OPERATORS, OpContext
from training_platform.data.operators.repetition import dup_ngram_char_fraction, repetition_stats

pytestmark = pytest.mark.unit


def op(name: str, fmt: str | None = "text", **params):
    spec = OPERATORS[name]
    return spec(spec.Params.model_validate(params), OpContext(fmt=fmt))


def mapped(name: str, text: str, **params) -> str:
    row, reason = op(name, **params).process({"text": text})
    assert reason is None
    return row["text"]


def removed(name: str, row, fmt="text", **params) -> str | None:
    out, reason = op(name, fmt, **params).process(row)
    assert (out is None) == (reason is not None)
    return reason


def test_registry_has_every_operator():
    assert sorted(OPERATORS) == [
        "char_ratio_filter",
        "fix_unicode",
        "length_filter",
        "normalize_punctuation",
        "normalize_whitespace",
        "redact_pii",
        "repetition_filter",
        "strip_html",
        "turn_filter",
    ]
    assert {name: spec.kind for name, spec in OPERATORS.items()} == {
        "char_ratio_filter": "filter",
        "fix_unicode": "mapper",
        "length_filter": "filter",
        "normalize_punctuation": "mapper",
        "normalize_whitespace": "mapper",
        "redact_pii": "mapper",
        "repetition_filter": "filter",
        "strip_html": "mapper",
        "turn_filter": "filter",
    }


# ---------------------------------------------------------------------------------------------- mappers


def test_fix_unicode():
    assert (
        mapped("fix_unicode", "The Mona Lisa doesnÃ¢â‚¬â„¢t have eyebrows.")
        == "The Mona Lisa doesn\u2019t have eyebrows."
    )
    assert mapped("fix_unicode", "cafe\u0301") == "caf\u00e9"  # NFC
    assert mapped("fix_unicode", "a\x07b\x00c\nd") == "abc\nd"  # control characters, newline kept
    assert mapped("fix_unicode", "ｆｕｌｌ", fix_character_width=True) == "full"
    assert mapped("fix_unicode", "\ufb01ne", normalization="NFKC") == "fine"


def test_normalize_whitespace():
    text = "\ufeffHello\u00a0 \u00a0world  \t!\u200b  \n\n\n\n    indented   code  \r\nend   "
    assert mapped("normalize_whitespace", text) == "Hello world !\n\n    indented code\nend"
    assert mapped("normalize_whitespace", "a\n\n\nb", max_blank_lines=0) == "a\nb"
    assert mapped("normalize_whitespace", "  a   b", keep_indentation=False) == "a b"


def test_normalize_punctuation():
    assert (
        mapped("normalize_punctuation", "\u201cHi\u201d \u2018x\u2019 a\u2014b 1\u20132 wait\u2026")
        == "\"Hi\" 'x' a-b 1-2 wait..."
    )
    assert mapped("normalize_punctuation", "Really!!!!!!! ??? ....") == "Really!!! ??? ..."
    assert mapped("normalize_punctuation", "\u4f60\u597d\uff01\u5417\uff1f") == "\u4f60\u597d!\u5417?"
    assert mapped("normalize_punctuation", "wow!!!!!", max_repeat=1) == "wow!"
    assert mapped("normalize_punctuation", "\u201cq\u201d", quotes=False) == "\u201cq\u201d"


def test_strip_html():
    html = (
        "<html><head><style>p {color: red}</style><script>alert(1)</script></head><body>"
        "<p>Hello&nbsp;<b>world</b> &amp; friends</p><!-- note --><ul><li>one</li><li>two</li></ul></body></html>"
    )
    assert mapped("strip_html", html) == "Hello\u00a0world & friends\n\none\n\ntwo"
    code = "Use List<T> when a < b, and <|im_start|> stays; <div>gone</div>"
    assert mapped("strip_html", code) == "Use List<T> when a < b, and <|im_start|> stays; \ngone"
    assert mapped("strip_html", "x <custom>y</custom>", only_known_tags=False) == "x y"
    assert mapped("strip_html", "no markup here") == "no markup here"


def test_redact_pii_each_kind_and_counts():
    # Made-up key-shaped strings (assembled so they do not look like committed secrets to scanners).
    text = (
        "Mail john.doe+x@example.co.uk or call +44 20 7946 0958 / (555) 123-4567. Server 192.168.1.20 and "
        "fe80:0:0:0:200:f8ff:fe21:67cf. Keys: "
        + "sk-proj-"
        + "abcdefghijklmnopqrstuvwx123, "
        + "AKIA"
        + "IOSFODNN7EXAMPLE, "
        "ghp_" + "a" * 36 + ' and api_key="s3cr3tV4lu3abcdef".'
    )
    redactor = op("redact_pii")
    row, _ = redactor.process({"text": text})
    assert row["text"] == (
        "Mail <EMAIL> or call <PHONE> / <PHONE>. Server <IP_ADDRESS> and <IP_ADDRESS>. Keys: "
        '<API_KEY>, <API_KEY>, <API_KEY> and api_key="<API_KEY>".'
    )
    assert dict(redactor.counters) == {"email": 1, "phone": 2, "ip": 2, "api_key": 4}


def test_redact_pii_leaves_ordinary_text_and_numbers_alone():
    text = "Version 1.2.3, 3 + 4 = 7, the year 2024-01-15, order #12345, ratio 10:30, score 99.5%."
    assert mapped("redact_pii", text) == text
    assert (
        mapped("redact_pii", "a@b.com and 10.0.0.1", kinds=["email"], placeholders={"email": "[e]"})
        == "[e] and 10.0.0.1"
    )


def test_mappers_touch_only_text_fields_of_the_format():
    row = {
        "messages": [{"role": "user", "content": "hi  there"}, {"role": "assistant", "content": "ok  "}],
        "meta": "keep  this",
    }
    out, _ = op("normalize_whitespace", "messages").process(row)
    assert out == {
        "messages": [{"role": "user", "content": "hi there"}, {"role": "assistant", "content": "ok"}],
        "meta": "keep  this",
    }
    assert row["messages"][0]["content"] == "hi  there"  # input untouched
    unchanged = {"messages": [{"role": "user", "content": "hi"}]}
    assert op("normalize_whitespace", "messages").process(unchanged)[0] is unchanged
    out, _ = op("redact_pii", "alpaca", fields=["output"]).process(
        {"instruction": "mail a@b.com", "input": "", "output": "a@b.com"}
    )
    assert out == {"instruction": "mail a@b.com", "input": "", "output": "<EMAIL>"}


# ---------------------------------------------------------------------------------------------- filters


def test_length_filter_chars_words():
    assert removed("length_filter", {"text": "one two"}, unit="words", min=3) == "words=2 < min 3"
    assert removed("length_filter", {"text": "one two three"}, unit="words", min=3) is None
    assert removed("length_filter", {"text": "x" * 11}, unit="chars", max=10) == "chars=11 > max 10"


@pytest.mark.parametrize(
    ("row", "fmt", "params", "reason"),
    [
        pytest.param(
            {"messages": [USER, {"role": "assistant", "content": "  "}]},
            "messages",
            {},
            "turn 1 (assistant) is empty",
            id="empty-turn",
        ),
        pytest.param(
            {"messages": [USER, {"role": "assistant", "content": 3}]},
            "messages",
            {},
            "invalid: messages[1].content: must be a string, got 3",
            id="invalid",
        ),
        pytest.param(
            {"messages": [USER, USER, {"role": "assistant", "content": "a"}]},
            "messages",
            {},
            "malformed turns: turn 1: expected assistant, got user",
            id="no-alternation",
        ),
        pytest.param(
            {
                "messages": [
                    USER,
                    {"role": "assistant", "content": "a"},
                    {"role": "system", "content": "s"},
                    USER,
                    {"role": "assistant", "content": "b"},
                ]
            },
            "messages",
            {},
            "malformed turns: turn 2: system turn after the start",
            id="late-system",
        ),
        pytest.param(
            {"messages": [USER, {"role": "assistant", "content": "a"}, USER]},
            "messages",
            {"require_valid": False},
            "malformed turns: last turn is user, not assistant",
            id="final-user",
        ),
        pytest.param(
            {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": ""}]},
            "sharegpt",
            {"require_valid": False},
            "turn 1 (assistant) is empty",
            id="sharegpt-empty",
        ),
        pytest.param(
            {"messages": [USER, {"role": "assistant", "content": "a"}]},
            "messages",
            {"min_turns": 3},
            "turns=2 < min 3",
            id="min-turns",
        ),
        pytest.param(
            {"instruction": "Add.", "input": "", "output": "   "},
            "alpaca",
            {"require_valid": False},
            "field output is empty",
            id="alpaca-empty-output",
        ),
    ],
)
def test_turn_filter_removes(row, fmt, params, reason):
    assert removed("turn_filter", row, fmt, **params) == reason


@pytest.mark.parametrize(
    ("row", "fmt"),
    [
        pytest.param(
            {
                "messages": [
                    {"role": "system", "content": "s"},
                    USER,
                    {"role": "assistant", "content": "a"},
                    {"role": "tool", "content": "t"},
                    {"role": "assistant", "content": "b"},
                ]
            },
            "messages",
            id="system-tool",
        ),
        pytest.param({"instruction": "Add.", "input": "", "output": "4"}, "alpaca", id="alpaca-empty-input-ok"),
        pytest.param({"prompt": "p", "chosen": "a", "rejected": "b"}, "preference", id="preference"),
    ],
)
def test_turn_filter_keeps(row, fmt):
    assert removed("turn_filter", row, fmt) is None


def test_repetition_filter():
    repeated_lines = "\n".join(["buy now"] * 5 + ["something else entirely here"])
    assert removed("repetition_filter", {"text": repeated_lines}).startswith("dup_para_frac") is False
    assert removed("repetition_filter", {"text": repeated_lines}).startswith("dup_line_frac=0.667")
    spam = " ".join(["the cat sat on the mat"] * 10)
    assert removed("repetition_filter", {"text": spam}).startswith("top_2gram_char_frac")
    natural = (
        "Training data quality decides results, so users need to see what is in a dataset, fix it, and know "
        "which exact version a model was trained on before they compare two runs with each other."
    )
    assert removed("repetition_filter", {"text": natural}) is None
    assert removed("repetition_filter", {"text": "ha ha ha ha"}) is None  # too short to judge on n-grams
    stats = repetition_stats(spam)
    assert stats["dup_5gram_char_frac"] > 0.5
    words = list("abcdeabcde")
    assert dup_ngram_char_fraction(words, 5, 19) == pytest.approx(5 / 19)


def test_char_ratio_filter():
    assert removed("char_ratio_filter", {"text": "#### $$$ !!! ??? ***"}).startswith("alnum_ratio=0.000")
    assert (
        removed("char_ratio_filter", {"text": "ok: {x} [y] (z)"}, min_alnum_ratio=None, max_special_ratio=0.4)
        == "special_ratio=0.583 > 0.4"
    )
    assert removed(
        "char_ratio_filter", {"text": "1234567 abc"}, min_alnum_ratio=None, max_special_ratio=None, max_digit_ratio=0.5
    ).startswith("digit_ratio=0.700")
    assert removed("char_ratio_filter", {"text": "A normal sentence, with commas."}) is None


# ---------------------------------------------------------------------------------------------- recipes


def test_recipe_errors_name_their_place():
    with pytest.raises(RecipeError) as info:
        parse_recipe(
            {
                "operators": [
                    {"op": "length_filter", "unit": "lines", "min": 1},
                    {"op": "length_filter", "unit": "tokens", "max": 5},
                    {"op": "no_such_op"},
                    {"op": "redact_pii", "kindz": ["email"]},
                    {"op": "char_ratio_filter", "min_alnum_ratio": 2},
                    {"unit": "words"},
                ],
                "colour": "blue",
            }
        )
    errors = info.value.errors
    assert ("colour", "unknown key; a recipe has name, description, format and operators") in errors
    assert ("operators[0].unit", "must be one of 'chars', 'words' or 'tokens', got 'lines'") in errors
    assert ("operators[1]", "unit tokens needs a tokenizer") in errors
    assert any(e[0] == "operators[2].op" and "unknown operator 'no_such_op'" in e[1] for e in errors)
    assert ("operators[3].kindz", "unknown field (did you mean 'kinds'?)") in errors
    assert ("operators[4].min_alnum_ratio", "must be <= 1.0, got 2") in errors
    assert ("operators[5].op", "each operator needs `op: <name>`") in errors


def test_recipe_forms(tmp_path):
    as_list = parse_recipe([{"op": "fix_unicode"}, {"op": "length_filter", "params": {"min": 2}}])
    assert [s.op for s in as_list.steps] == ["fix_unicode", "length_filter"]
    assert as_list.to_dict()["operators"][1] == {
        "op": "length_filter",
        "fields": None,
        "unit": "words",
        "min": 2,
        "max": None,
        "tokenizer": None,
    }
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"name": "x", "operators": [{"op": "strip_html"}]}))
    assert load_recipe(path).name == "x"
    (tmp_path / "bad.yaml").write_text("operators: [\n")
    with pytest.raises(RecipeError, match="cannot parse bad.yaml"):
        load_recipe(tmp_path / "bad.yaml")
    with pytest.raises(RecipeError, match="no such file"):
        load_recipe(tmp_path / "missing.yaml")


def test_shipped_recipes_are_valid():
    from pathlib import Path

    recipes = sorted((Path(__file__).resolve().parents[2] / "configs" / "recipes").glob("*.yaml"))
    assert len(recipes) >= 3
    for path in recipes:
        assert load_recipe(path).steps, path


def test_clean_file_report(tmp_path):
    rows = [
        {"messages": [USER, {"role": "assistant", "content": "It is 4. Mail me at a@b.com  for more."}]},
        {"messages": [USER, {"role": "assistant", "content": "   "}]},
        {"messages": [USER, {"role": "assistant", "content": "<p>Four</p>"}]},
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]},
        {"messages": [USER, {"role": "assistant", "content": "The answer is four, since two plus two is four."}]},
    ]
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        yaml.safe_dump(
            {
                "name": "t",
                "operators": [
                    {"op": "strip_html"},
                    {"op": "normalize_whitespace"},
                    {"op": "redact_pii"},
                    {"op": "turn_filter"},
                    {"op": "length_filter", "unit": "words", "min": 4},
                ],
            }
        )
    )
    report = clean_file(src, tmp_path / "out.jsonl", recipe, report_path=tmp_path / "report.json", samples=1)
    assert json.loads((tmp_path / "report.json").read_text()) == json.loads(json.dumps(report))
    assert (report["input_rows"], report["output_rows"], report["removed_rows"], report["format"]) == (
        5,
        3,
        2,
        "messages",
    )
    ops = {o["op"]: o for o in report["operators"]}
    assert [(o["input_rows"], o["kept"], o["removed"], o["modified"]) for o in report["operators"]] == [
        (5, 5, 0, 1),
        (5, 5, 0, 2),
        (5, 5, 0, 1),
        (5, 4, 1, 0),
        (4, 3, 1, 0),
    ]
    assert ops["redact_pii"]["counts"] == {"email": 1}
    # samples show the row as the operator saw it (after the earlier operators)
    assert ops["turn_filter"]["samples_removed"] == [
        {
            "index": 1,
            "line": 2,
            "reason": "turn 1 (assistant) is empty",
            "row": {"messages": [USER, {"role": "assistant", "content": ""}]},
        }
    ]
    assert ops["length_filter"]["removed_by_reason"] == {"words": 1}
    assert ops["strip_html"]["samples_modified"][0]["after"]["messages"][1]["content"] == "Four"
    out = read_jsonl(tmp_path / "out.jsonl")
    assert [r["messages"][1]["content"] for r in out] == [
        "It is 4. Mail me at <EMAIL> for more.",
        "Four",
        "The answer is four, since two plus two is four.",
    ]
    assert report["output_sha256"] != report["input_sha256"]


def test_clean_failure_leaves_no_output(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"text": "ok"}) + "\n{broken\n")
    from training_platform.data.formats import DatasetError

    with pytest.raises(DatasetError):
        clean_file(src, tmp_path / "out.jsonl", [{"op": "fix_unicode"}])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]

"""Audit reports (distributions, distinct-n, entropy, difficulty buckets and resampling), contamination with planted
leaks, and content-hashed dataset versions."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from data_helpers import read_jsonl, write_jsonl

from training_platform.core.files import sha256_file
from training_platform.data.contamination import (
    ContaminationIndex,
    contamination_report,
    decontaminate_file,
    find_contamination,
)
from training_platform.data.report import (
    DISTINCT_N_DEFINITION,
    _Diversity,
    audit_file,
    average_ranks,
    difficulty_features,
    resample_to_mix,
)
from training_platform.data.versions import DatasetVersion, describe_dataset, store_version

pytestmark = pytest.mark.unit

_WORD_LIST = (
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau "
    "upsilon phi chi psi omega apple banana cherry grape lemon mango melon olive peach pear plum"
)
WORDS = _WORD_LIST.split()


def sentence(rng: np.random.Generator, n: int) -> str:
    return " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), n))


# ---------------------------------------------------------------------------------------------- diversity


def test_distinct_n_follows_its_one_definition():
    d = _Diversity()
    d.add("The cat the CAT")  # tokens: the cat the cat -> 1-grams 4 (2 unique), 2-grams 3 (2 unique)
    d.add("a dog")  # 1-grams 2 (2 unique), 2-grams 1 (1 unique); no n-gram crosses into the previous text
    assert d.distinct(1) == pytest.approx(4 / 6)
    assert d.distinct(2) == pytest.approx(3 / 4)
    assert d.entropy(1) == pytest.approx(-(2 * (2 / 6) * math.log2(2 / 6) + 2 * (1 / 6) * math.log2(1 / 6)), abs=1e-4)
    d2 = _Diversity()
    d2.add("hello, world hello")  # punctuation stays attached: "hello," != "hello"
    assert d2.distinct(1) == 1.0
    assert "unique word n-grams / total word n-grams" in DISTINCT_N_DEFINITION


def test_average_ranks_share_ties():
    assert average_ranks(np.array([10, 20, 10, 30])).tolist() == [1.5, 3.0, 1.5, 4.0]


def test_difficulty_features():
    row = {
        "messages": [
            {"role": "user", "content": "Tom has 3 apples and buys 4 more. Then he eats 2."},
            {"role": "assistant", "content": "3 + 4 = 7, 7 - 2 = 5. The answer is 5."},
        ]
    }
    assert difficulty_features(row, "messages") == {
        "words": 26,
        "response_words": 14,
        "numeric_steps": 4,
        "numbers": 10,
        "turns": 2,
    }


def _graded_rows(n: int = 90) -> list[dict]:
    """Easy: one step; medium: three; hard: six, with longer text (random words keep rows distinct)."""
    rng = np.random.default_rng(n)
    rows = []
    for i in range(n):
        steps = (1, 3, 6)[i % 3]
        work = ", ".join(f"{k} + {k + 1} = {2 * k + 1}" for k in range(steps))
        rows.append(
            {"prompt": f"Problem {i}: {sentence(rng, 4 * steps)}", "completion": f"{work}. The answer is {steps}."}
        )
    return rows


def test_audit_report_shape_and_buckets(tmp_path):
    rows = _graded_rows()
    rows.append(rows[0])  # one exact duplicate
    src = write_jsonl(tmp_path / "train.jsonl", rows)
    report = audit_file(src, report_path=tmp_path / "report.json")
    assert json.loads((tmp_path / "report.json").read_text()) == json.loads(json.dumps(report))
    assert report["rows"] == 91 and report["format"] == "prompt_completion"
    assert report["sha256"] == sha256_file(src)
    assert 0 < report["distinct_1"] < 1 and 0 < report["distinct_2"] <= 1
    assert report["definitions"]["distinct_n"] == DISTINCT_N_DEFINITION
    words = report["stats"]["words"]
    assert sum(words["histogram"]["counts"]) == 91 and words["min"] <= words["p50"] <= words["max"]
    assert report["stats"]["turns"]["counts"] == {"2": 91}
    assert report["stats"]["tokens"] is None
    buckets = report["difficulty_buckets"]
    assert buckets == report["difficulty"]["buckets"] and sum(buckets.values()) == 91
    assert buckets["easy"] >= 25 and buckets["hard"] >= 25
    assert report["duplicates"]["exact_duplicates"] == 1 and report["duplicate_rate"] == pytest.approx(1 / 91, 1e-4)
    assert "contaminated_rows" not in report


def test_resample_to_a_target_mix(tmp_path):
    src = write_jsonl(tmp_path / "train.jsonl", _graded_rows(90))
    report = resample_to_mix(src, tmp_path / "out.jsonl", {"easy": 0.5, "medium": 0.3, "hard": 0.2}, seed=1)
    assert report["available"] == {"easy": 30, "medium": 30, "hard": 30}
    assert report["output_buckets"] == {"easy": 30, "medium": 18, "hard": 12}  # easy is the limit: 30 / 0.5 = 60
    assert len(read_jsonl(tmp_path / "out.jsonl")) == 60
    audit = audit_file(tmp_path / "out.jsonl", dedup=False)
    assert audit["rows"] == 60
    with_replacement = resample_to_mix(src, tmp_path / "more.jsonl", {"hard": 1}, total=50, replace=True)
    assert with_replacement["output_buckets"] == {"easy": 0, "medium": 0, "hard": 50}
    with pytest.raises(ValueError, match="--mix"):
        resample_to_mix(src, tmp_path / "x.jsonl", {"trivial": 1.0})


def test_constant_features_put_everything_in_the_middle(tmp_path):
    src = write_jsonl(tmp_path / "same.jsonl", [{"text": f"row {i}"} for i in range(9)])
    assert audit_file(src, dedup=False)["difficulty_buckets"] == {"easy": 0, "medium": 9, "hard": 0}


# ---------------------------------------------------------------------------------------------- contamination


def test_contamination_finds_planted_leaks(tmp_path):
    rng = np.random.default_rng(3)
    eval_rows = [{"question": sentence(rng, 25), "answer": str(i)} for i in range(40)]
    eval_path = write_jsonl(tmp_path / "eval.jsonl", eval_rows)
    train = [{"prompt": sentence(rng, 30), "completion": sentence(rng, 20)} for _ in range(300)]
    leaks = {12: (3, "verbatim"), 77: (8, "embedded"), 150: (20, "reformatted"), 222: (35, "slice")}
    for row, (eval_index, how) in leaks.items():
        question = eval_rows[eval_index]["question"]
        if how == "verbatim":
            train[row]["prompt"] = question
        elif how == "embedded":
            train[row]["completion"] = "As asked before: " + question + " and so on."
        elif how == "reformatted":
            train[row]["prompt"] = question.upper().replace(" ", ",  ")
        else:
            train[row]["prompt"] = " ".join(question.split()[5:19])  # a 14-word slice
    src = write_jsonl(tmp_path / "train.jsonl", train)
    report = audit_file(src, eval_sets=[eval_path], dedup=False)
    assert report["contaminated_rows"] == sorted(leaks)
    found = {r["row"]: r for r in report["contamination"]["rows"]}
    for row, (eval_index, _) in leaks.items():
        assert (found[row]["eval_set"], found[row]["eval_row"]) == ("eval", eval_index)
    assert found[12]["matched_ngrams"] == 25 - 13 + 1
    assert found[222]["matched_ngrams"] == 2

    clean = decontaminate_file(src, tmp_path / "clean.jsonl", [eval_path], report_path=tmp_path / "d.json")
    assert (clean["removed_rows"], clean["output_rows"]) == (4, 296)
    assert audit_file(tmp_path / "clean.jsonl", eval_sets=[eval_path], dedup=False)["contaminated_rows"] == []


def test_contamination_ngram_size_is_configurable(tmp_path):
    eval_path = write_jsonl(
        tmp_path / "eval.jsonl",
        [{"text": "one two three four five six seven eight nine ten eleven twelve thirteen fourteen"}],
    )
    src = write_jsonl(
        tmp_path / "train.jsonl",
        [{"text": "so: one two three four five six seven eight nine"}, {"text": "unrelated words entirely here today"}],
    )
    assert contamination_report(src, [eval_path])["contaminated_rows"] == []
    assert contamination_report(src, [eval_path], n=8)["contaminated_rows"] == [0]


def test_short_eval_items_match_exactly_or_as_whole_sequences():
    index = ContaminationIndex(13)
    index.add_texts("arith", [["17+25="], ["What is the sum of seventeen and twenty five today"], ["4"]])
    rows = [
        {"text": "17+25="},
        {"text": "17+25= 42"},
        {"text": "Q: what is the sum of seventeen and twenty five today? A: 42"},
        {"text": "4"},
    ]
    found = find_contamination(rows, index)
    assert [(f["row"], f["eval_row"]) for f in found] == [(0, 0), (2, 1)]
    assert index.skipped_short == 1  # "4" is too short to mean anything


# ---------------------------------------------------------------------------------------------- versions


def test_dataset_versions(tmp_path):
    src = write_jsonl(
        tmp_path / "a.jsonl",
        [{"prompt": "p", "completion": "c", "n": 1}, {"prompt": "q", "completion": "d", "n": None}],
    )
    version = describe_dataset(src, operation="upload")
    assert version.sha256 == sha256_file(src) and len(version.sha256) == 64
    assert (version.rows, version.format) == (2, "prompt_completion")
    assert version.schema == {"prompt": "string", "completion": "string", "n": "integer|null"}
    child = describe_dataset(src, parent_sha256=version.sha256, operation="clean", params={"operators": []})
    assert DatasetVersion.from_dict(json.loads(json.dumps(child.to_dict()))) == child
    stored = store_version(src, tmp_path / "store", operation="upload")
    again = store_version(src, tmp_path / "store", operation="upload")
    assert stored.path == again.path == str(tmp_path / "store" / f"{version.sha256}.jsonl")
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == [
        f"{version.sha256}.json",
        f"{version.sha256}.jsonl",
    ]


def test_lineage_chain_upload_clean_dedup(tmp_path):
    """Each derived file's report carries its DatasetVersion, whose parent is the input's sha256 (the DB layer will
    store these; here the chain is followed by hand)."""
    from training_platform.data.clean import clean_file
    from training_platform.data.dedup import dedup_file
    from training_platform.data.validate import ingest_file

    rows = [{"text": f"Row number {i} talks about topic {i % 7} in some detail here."} for i in range(20)]
    rows += [rows[3], {"text": "too short"}]
    upload = write_jsonl(tmp_path / "upload.jsonl", rows)
    assert ingest_file(upload, tmp_path / "ds.jsonl", policy="reject").accepted
    uploaded = describe_dataset(tmp_path / "ds.jsonl", operation="upload")
    recipe = [{"op": "length_filter", "unit": "words", "min": 3}]
    cleaned = clean_file(tmp_path / "ds.jsonl", tmp_path / "clean.jsonl", recipe)
    deduped = dedup_file(tmp_path / "clean.jsonl", tmp_path / "dedup.jsonl")
    assert cleaned["version"]["parent_sha256"] == uploaded.sha256
    assert cleaned["version"]["operation"] == "clean"
    assert cleaned["version"]["params"] == {
        "operators": [
            {"op": "length_filter", "fields": None, "unit": "words", "min": 3, "max": None, "tokenizer": None}
        ]
    }
    assert deduped["version"]["parent_sha256"] == cleaned["version"]["sha256"] == sha256_file(tmp_path / "clean.jsonl")
    assert deduped["version"]["sha256"] == sha256_file(tmp_path / "dedup.jsonl")
    assert deduped["version"]["params"]["threshold"] == 0.8
    assert (uploaded.rows, cleaned["version"]["rows"], deduped["version"]["rows"]) == (22, 21, 20)

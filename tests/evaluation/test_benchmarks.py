"""Benchmarks: data validation, prompts (zero-/n-shot, chat/completion), HumanEval code extraction."""

from __future__ import annotations

import gzip
import json

import pytest
from eval_helpers import write_jsonl

from training_platform.evaluation.benchmarks import BENCHMARKS, EvalDataError, benchmark_spec, get_benchmark, load_rows
from training_platform.evaluation.benchmarks.humaneval import extract_code, instruct_completion
from training_platform.evaluation.config import BenchmarkSpec, EvalConfig

pytestmark = pytest.mark.unit

GSM = [
    {"question": "Tom has 3 apples and buys 2. How many?", "answer": "3+2=5\n#### 5"},
    {"question": "What is 10*10?", "answer": "#### 100"},
    {"question": "What is 1,000+1?", "answer": "#### 1,001"},
]


def test_registry():
    assert {"gsm8k", "math", "math500", "humaneval", "multiple_choice", "custom"} <= set(BENCHMARKS)
    with pytest.raises(ValueError, match="unknown benchmark 'mmlu_pro'"):
        get_benchmark("mmlu_pro")


def test_gsm8k_items_and_bad_rows(tmp_path):
    path = write_jsonl(tmp_path / "gsm.jsonl", GSM)
    bench = get_benchmark(BenchmarkSpec(name="gsm8k", data=str(path), limit=2))
    items = bench.load_items()
    assert [i.reference for i in items] == ["5", "100"]  # limit applied, gold normalised

    bad = write_jsonl(
        tmp_path / "bad.jsonl",
        [GSM[0], {"question": "q"}, {"question": "", "answer": "#### 1"}, {"question": "q", "answer": "#### none"}],
    )
    with pytest.raises(EvalDataError) as info:
        get_benchmark(BenchmarkSpec(name="gsm8k", data=str(bad))).load_items()
    errors = [str(e) for e in info.value.errors]
    assert errors[0].endswith("bad.jsonl:2: missing or empty 'answer'")
    assert errors[1].endswith("bad.jsonl:3: missing or empty 'question'")
    assert "bad.jsonl:4: no final answer" in errors[2]

    with pytest.raises(EvalDataError, match="needs a local data file: --data gsm8k=FILE"):
        get_benchmark("gsm8k").load_items()
    with pytest.raises(EvalDataError, match="not found"):
        get_benchmark(BenchmarkSpec(name="gsm8k", data=str(tmp_path / "missing.jsonl"))).load_items()


def test_gsm8k_prompts(tmp_path):
    path = write_jsonl(tmp_path / "gsm.jsonl", GSM)
    # n-shot completion prompt: lm-evaluation-harness's exact format.
    bench = get_benchmark(BenchmarkSpec(name="gsm8k", data=str(path), n_shot=2))
    items = bench.load_items()
    pool = bench.fewshot_items(items)
    request = bench.build_request(items[2], bench.shots_for(items[2], pool), chat=False)
    assert request.prompt == (
        f"Question: {GSM[0]['question']}\nAnswer: {GSM[0]['answer']}\n\n"
        f"Question: {GSM[1]['question']}\nAnswer: {GSM[1]['answer']}\n\n"
        f"Question: {GSM[2]['question']}\nAnswer:"
    )
    shots = bench.shots_for(items[0], pool)
    assert [s.id for s in shots] == [items[1].id, items[2].id]  # never the item itself
    assert bench.stops(chat=False) == ("Question:", "</s>", "<|im_end|>")
    # chat: n-shot examples become earlier turns
    chat = bench.build_request(items[2], bench.shots_for(items[2], pool), chat=True)
    assert [m["role"] for m in chat.messages] == ["user", "assistant", "user", "assistant", "user"]
    assert chat.messages[-1]["content"].endswith(GSM[2]["question"])
    assert "####" in chat.messages[-1]["content"]  # the instruction asks for the #### format
    # a template replaces the question text
    templated = get_benchmark(BenchmarkSpec(name="gsm8k", data=str(path), prompt_template="Q: {question} A:"))
    assert templated.build_request(items[0], [], chat=False).prompt == f"Q: {GSM[0]['question']} A:"


def test_gsm8k_score_fields(tmp_path):
    bench = get_benchmark(BenchmarkSpec(name="gsm8k", data=str(write_jsonl(tmp_path / "g.jsonl", GSM))))
    item = bench.load_items()[2]
    scored = bench.score(item, "1000 + 1 = 1,001 so the answer is 1,001.\nCheck: 1001 - 1 = 1000")
    assert scored == {
        "extracted": "1001",
        "correct": True,
        "extracted_strict": "1001",
        "correct_strict": True,
        "extracted_flexible": "1000",
        "correct_flexible": False,
    }


def test_math_items(tmp_path):
    rows = [
        {"problem": "p1", "solution": "so \\boxed{\\frac{1}{2}}", "unique_id": "test/a.json"},
        {"problem": "p2", "answer": "7", "solution": "\\boxed{8}"},
        {"problem": "p3", "solution": "no box"},
    ]
    with pytest.raises(EvalDataError, match="3: no gold answer"):
        get_benchmark(BenchmarkSpec(name="math", data=str(write_jsonl(tmp_path / "m.jsonl", rows)))).load_items()
    bench = get_benchmark(BenchmarkSpec(name="math500", data=str(write_jsonl(tmp_path / "m2.jsonl", rows[:2]))))
    items = bench.load_items()
    assert [(i.id, i.reference) for i in items] == [("test/a.json", "\\frac{1}{2}"), ("1", "7")]
    assert "\\boxed{}" in bench.build_request(items[0], [], chat=True).messages[-1]["content"]
    assert bench.build_request(items[0], [], chat=False).prompt == "Problem:\np1\n\nSolution:"
    assert bench.score(items[0], "Thus $x = \\boxed{0.5}$.")["correct"] is True


def test_humaneval_default_data_is_the_shipped_file():
    bench = get_benchmark(BenchmarkSpec(name="humaneval", limit=3))
    items = bench.load_items()
    assert [i.id for i in items] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]
    assert len(get_benchmark("humaneval").load_items()) == 164
    completion = bench.build_request(items[0], [], chat=False)
    assert completion.prompt == items[0].row["prompt"]
    assert bench.stops(chat=False) == ("\nclass", "\ndef", "\n#", "\nif", "\nprint")
    instruct = bench.build_request(items[0], [], chat=True)
    assert "```python" in instruct.messages[-1]["content"] and bench.stops(chat=True) == ()


def test_humaneval_code_extraction():
    problem = {"entry_point": "add", "prompt": 'def add(a, b):\n    """Add."""\n'}
    reply = "Sure!\n```python\ndef add(a, b):\n    return a + b\n```\nDone."
    assert extract_code(reply) == "def add(a, b):\n    return a + b\n"
    assert instruct_completion(problem, reply) == "\ndef add(a, b):\n    return a + b\n"  # redefines after prompt
    body = "```\n    return a + b\n```"
    assert instruct_completion(problem, body) == "    return a + b\n"  # a body continues the prompt
    assert extract_code("no fences") == "no fences"
    two = "```text\nx\n```\n```py\nprint(1)\n```"
    assert extract_code(two) == "print(1)\n"  # the python block wins


def test_multiple_choice(tmp_path):
    rows = [
        {"question": "2+2?", "choices": ["3", "4"], "answer": 1, "subject": "high_school_math"},
        {"question": "Capital of France?", "A": "Rome", "B": "Paris", "C": "Oslo", "answer": "B"},
        {"question": "Pick", "choices": ["x", "y"], "answer": "y"},
    ]
    bench = get_benchmark(BenchmarkSpec(name="multiple_choice", data=str(write_jsonl(tmp_path / "mc.jsonl", rows))))
    items = bench.load_items()
    assert [i.reference for i in items] == ["B", "B", "B"]
    assert bench.context(items[0], []) == (
        "The following are multiple choice questions (with answers) about high "
        "school math.\n\n2+2?\nA. 3\nB. 4\nAnswer:"
    )
    assert bench.continuations(items[1]) == [" A", " B", " C"]
    assert bench.score_loglikelihoods(items[1], [(-3.0, False), (-1.0, True), (-2.0, False)])["correct"] is True
    assert bench.score(items[1], "The answer is B.")["extracted"] == "B"
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"question": "q", "choices": ["a", "b"], "answer": 5}])
    with pytest.raises(EvalDataError, match="out of range"):
        get_benchmark(BenchmarkSpec(name="multiple_choice", data=str(bad))).load_items()


def test_custom_needs_a_scorer(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"prompt": "2+2=", "answer": "4"}])
    with pytest.raises(EvalDataError, match="no scorer"):
        get_benchmark(BenchmarkSpec(name="custom", data=str(path))).load_items()
    bench = get_benchmark(benchmark_spec({"name": "custom", "data": str(path), "scorer": "numeric"}))
    item = bench.load_items()[0]
    assert bench.score(item, "It is 4.") == {"extracted": "4", "correct": True, "scorer": "numeric"}
    per_row = write_jsonl(tmp_path / "c2.jsonl", [{"question": "Say hi", "answer": "hi", "scorer": "contains"}])
    assert get_benchmark(BenchmarkSpec(name="custom", data=str(per_row))).load_items()[0].extra["scorer"] == "contains"


def test_load_rows_formats(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps(GSM))
    assert len(load_rows(tmp_path / "a.json")) == 3
    with gzip.open(tmp_path / "b.jsonl.gz", "wt") as f:
        f.write("".join(json.dumps(r) + "\n" for r in GSM))
    assert len(load_rows(tmp_path / "b.jsonl.gz")) == 3
    (tmp_path / "c.jsonl").write_text('{"question": "q"}\nnot json\n[1]\n')
    with pytest.raises(EvalDataError) as info:
        load_rows(tmp_path / "c.jsonl")
    assert [e.split(": ", 1)[0].rsplit(":", 1)[1] for e in map(str, info.value.errors)] == ["2", "3"]


def test_config_validation():
    with pytest.raises(ValueError, match="pass@10 needs n_samples >= 10"):
        BenchmarkSpec(name="humaneval", k=[1, 10], n_samples=5, temperature=0.8)
    with pytest.raises(ValueError, match="needs sampling"):
        BenchmarkSpec(name="gsm8k", n_samples=4)
    with pytest.raises(ValueError, match="backend 'openai' needs `endpoint`"):
        EvalConfig(model={"backend": "openai", "path": "m"}, benchmarks=[{"name": "gsm8k"}])
    with pytest.raises(ValueError, match="only with backend 'openai'"):
        EvalConfig(model={"path": "m", "endpoint": "judge"}, benchmarks=[{"name": "gsm8k"}])
    with pytest.raises(ValueError, match="Extra inputs"):
        EvalConfig(
            model={"backend": "openai", "path": "m", "endpoint": "e", "base_url": "http://x"},
            benchmarks=[{"name": "gsm8k"}],
        )
    with pytest.raises(ValueError, match="listed twice"):
        EvalConfig(model={"path": "m"}, benchmarks=[{"name": "gsm8k"}, {"name": "gsm8k"}])
    with pytest.raises(ValueError, match="Extra inputs"):
        BenchmarkSpec(name="gsm8k", shots=3)

"""Benchmarks are a registry: each has its own params model (EvalConfig's union is built from them) and the code
around them asks the class (options, sandbox, predictions, report) instead of branching on a name."""

from __future__ import annotations

from pathlib import Path

import pytest

from training_platform.evaluation.benchmarks import BENCHMARKS, benchmark_spec, get_benchmark
from training_platform.evaluation.config import BenchmarkSpec, EvalConfig
from training_platform.evaluation.request import EvalRequest, RequestError

pytestmark = pytest.mark.unit


def test_every_benchmark_has_its_own_params_model_chosen_by_name():
    for name, cls in BENCHMARKS.items():
        assert cls.params is not BenchmarkSpec and issubclass(cls.params, BenchmarkSpec)
        config = EvalConfig(model={"path": "m"}, benchmarks=[{"name": name}])
        assert type(config.benchmarks[0]) is cls.params
    config = EvalConfig(model={"path": "m"}, benchmarks=[BenchmarkSpec(name="humaneval", limit=2)])
    assert type(config.benchmarks[0]) is BENCHMARKS["humaneval"].params and config.benchmarks[0].limit == 2


def test_a_field_of_another_benchmark_is_refused_naming_it():
    with pytest.raises(RequestError) as info:
        EvalRequest.model_validate({"benchmarks": [{"name": "gsm8k", "mode": "instruct"}]}).to_config("m")
    assert [path for path, _ in info.value.errors] == ["benchmarks.0.mode"]
    assert benchmark_spec({"name": "humaneval", "mode": "instruct"}).mode == "instruct"  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="unknown benchmark 'nope'"):
        benchmark_spec({"name": "nope"})


def test_options_sandbox_and_report_are_asked_of_the_class():
    humaneval, custom, gsm8k = BENCHMARKS["humaneval"], BENCHMARKS["custom"], BENCHMARKS["gsm8k"]
    assert "n_shot" not in humaneval.run_options and {"mode", "timeout_s"} <= humaneval.run_options
    assert {"scorer", "extract_regex"} <= custom.run_options and "n_shot" in gsm8k.run_options
    assert humaneval.report_reference == "result" and gsm8k.report_reference == "reference"
    source = (Path(__file__).resolve().parents[2] / "training_platform" / "evaluation" / "runner.py").read_text()
    assert '"humaneval"' not in source
    bench = get_benchmark("gsm8k")
    assert bench.run_info(chat=False) == {}
    items, outputs = bench.items_from_predictions(
        [{"question": "1+1?", "answer": "#### 2", "output": "#### 2"}], "rows"
    )
    assert outputs == ["#### 2"] and bench.scored_row(bench.score_predicted(items, outputs)[0])["correct"] is True

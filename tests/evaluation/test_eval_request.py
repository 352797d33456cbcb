"""Evaluation requests (POST /evaluations, schedules) -> EvalConfig; cron expressions; metric keys; checkpoint pins."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from training_platform.evaluation.benchmarks import BENCHMARKS, benchmark_spec, get_benchmark
from training_platform.evaluation.config import BenchmarkSpec
from training_platform.evaluation.metrics import Metric
from training_platform.evaluation.request import (
    EvalRequest,
    RequestError,
    next_fire_time,
    parse_cron,
    parse_metric_key,
)

pytestmark = pytest.mark.unit


def _errors(request: dict, model: str = "m") -> dict[str, str]:
    with pytest.raises(RequestError) as info:
        EvalRequest.model_validate(request).to_config(model)
    return dict(info.value.errors)


def test_generation_defaults_apply_to_every_benchmark_unless_it_sets_the_field():
    config = EvalRequest.model_validate(
        {
            "benchmarks": ["gsm8k", {"name": "math", "max_new_tokens": 512}],
            "generation": {"max_new_tokens": 64, "n_shot": 2},
            "backend": {"batch_size": 4},
            "seed": 3,
        }
    ).to_config("some/model", name="nightly")
    gsm8k, math = config.benchmarks
    assert (gsm8k.max_new_tokens, gsm8k.n_shot) == (64, 2)
    assert (math.max_new_tokens, math.n_shot) == (512, 2)
    assert config.model.path == "some/model" and config.model.batch_size == 4
    assert config.seed == 3 and config.name == "nightly"


def test_errors_name_the_field_the_user_wrote():
    errors = _errors(
        {
            "benchmarks": ["gsm8k", {"name": "humaneval", "top_p": 0}, "nope"],
            "generation": {"max_new_tokens": 0},
            "backend": {"batch_size": 0, "path": "x"},
        }
    )
    assert "backend.path" in errors
    assert _errors({"benchmarks": ["nope"]}) == {
        "benchmarks.0.name": "unknown benchmark 'nope'; known: " + ", ".join(sorted(BENCHMARKS))
    }
    errors = _errors(
        {
            "benchmarks": ["gsm8k", {"name": "humaneval", "top_p": 0}],
            "generation": {"max_new_tokens": 0},
            "backend": {"batch_size": 0},
        }
    )
    assert errors["backend.batch_size"] == "must be >= 1, got 0"
    assert errors["generation.max_new_tokens"] == "must be >= 1, got 0 (the default for 'gsm8k', 'humaneval')"
    assert errors["benchmarks.1.top_p"] == "must be > 0.0, got 0"


def test_a_cross_field_rule_broken_by_a_default_blames_the_default():
    errors = _errors({"benchmarks": ["humaneval"], "generation": {"n_samples": 5}})
    assert errors == {"generation.n_samples": "n_samples > 1 needs sampling: set temperature > 0"}
    errors = _errors({"benchmarks": [{"name": "humaneval", "n_samples": 5}]})
    assert errors == {"benchmarks.0": "n_samples > 1 needs sampling: set temperature > 0"}
    assert _errors({"benchmarks": ["gsm8k", "gsm8k"]}) == {"benchmarks": "benchmark listed twice: gsm8k"}


def test_prompt_templates_take_plain_field_names_only():
    errors = _errors({"benchmarks": [{"name": "gsm8k", "prompt_template": "{question.__class__.__mro__}"}]})
    assert errors == {
        "benchmarks.0.prompt_template": "use plain field names such as {question}, not {question.__class__.__mro__}"
    }
    assert (
        "not a valid format string"
        in _errors({"benchmarks": [{"name": "gsm8k", "prompt_template": "{q"}]})["benchmarks.0.prompt_template"]
    )


def test_unknown_keys_are_refused():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="generation.temprature"):
        EvalRequest.model_validate({"benchmarks": ["gsm8k"], "generation": {"temprature": 0.5}})


def test_metric_keys_are_checked_against_what_the_benchmark_reports():
    config = EvalRequest.model_validate(
        {"benchmarks": ["gsm8k", {"name": "humaneval", "n_samples": 5, "temperature": 0.8, "k": [1, 5]}]}
    ).to_config("m")
    assert parse_metric_key("gsm8k/accuracy_strict", config) == ("gsm8k", "accuracy_strict")
    assert parse_metric_key("humaneval/pass@5", config) == ("humaneval", "pass@5")
    with pytest.raises(ValueError, match="gsm8k reports accuracy, accuracy_strict, accuracy_flexible; not 'acc'"):
        parse_metric_key("gsm8k/acc", config)
    with pytest.raises(ValueError, match="'math' is not evaluated here"):
        parse_metric_key("math/accuracy", config)
    with pytest.raises(ValueError, match="expected BENCHMARK/METRIC"):
        parse_metric_key("accuracy")


@pytest.mark.parametrize(
    "spec",
    [
        BenchmarkSpec(name="gsm8k"),
        BenchmarkSpec(name="gsm8k", n_samples=3, temperature=0.5, k=[1, 3]),
        BenchmarkSpec(name="math"),
        benchmark_spec({"name": "custom", "scorer": "exact"}),
        BenchmarkSpec(name="multiple_choice"),
        BenchmarkSpec(name="humaneval", n_samples=4, temperature=0.8, k=[1, 2]),
    ],
)
def test_metric_names_are_what_aggregate_reports(spec):
    bench = get_benchmark(spec)
    records = [
        {"id": str(i // spec.n_samples), "correct": i % 2 == 0, "correct_strict": True, "correct_flexible": False}
        for i in range(4 * spec.n_samples)
    ]
    metrics = bench.aggregate(records)
    assert all(isinstance(m, Metric) for m in metrics.values())
    assert sorted(bench.metric_names()) == sorted(metrics)


def test_cron_expressions():
    assert parse_cron("  0   3 * * * ") == "0 3 * * *"
    assert parse_cron("* * * * * */5") == "* * * * * */5"  # a 6th field: seconds (last)
    with pytest.raises(ValueError, match="expected 5 fields"):
        parse_cron("0 3 * *")
    with pytest.raises(ValueError, match="invalid cron expression"):
        parse_cron("61 * * * *")
    base = datetime(2026, 11, 22, 2, 59, 30, tzinfo=UTC)
    assert next_fire_time("0 3 * * *", base) == datetime(2026, 11, 22, 3, 0, tzinfo=UTC)
    assert next_fire_time("0 3 * * *", datetime(2026, 11, 22, 3, 0, tzinfo=UTC)) == datetime(
        2026, 11, 23, 3, 0, tzinfo=UTC
    ), "strictly after"
    assert next_fire_time("* * * * * */20", base) == datetime(2026, 11, 22, 2, 59, 40, tzinfo=UTC)
    naive = datetime(2026, 11, 22, 2, 59, 30)  # a naive time (SQLite) is UTC
    assert next_fire_time("0 3 * * *", naive) == datetime(2026, 11, 22, 3, 0, tzinfo=UTC)


def test_rotation_keeps_pinned_checkpoints(tmp_path: Path):
    from training_platform.training.run_writer import RunWriter
    from training_platform.training.rundir import RunDir, checkpoint_name

    run = RunDir(tmp_path / "run")
    run.create()
    out = tmp_path / "trainer_out"
    out.mkdir()
    writer = RunWriter(run, keep_last=1)  # hashing and rotation on its background thread, as in training

    def save(step: int) -> None:
        (out / f"checkpoint-{step}").mkdir()
        (out / f"checkpoint-{step}" / "model.safetensors").write_bytes(b"w" * step)
        writer.checkpoint_saved(step, out / f"checkpoint-{step}")
        writer.flush()

    save(10)
    run.pin(run.checkpoints / checkpoint_name(10), "eval-7")
    run.pin(run.checkpoints / checkpoint_name(10), "best")
    save(20)
    save(30)
    assert [p.name for p in run.checkpoint_dirs()] == ["step_000010", "step_000030"]  # 20 rotated, 10 pinned
    run.unpin_holder("eval-7")
    assert run.is_pinned(run.checkpoints / "step_000010")  # still the best
    run.unpin(run.checkpoints / "step_000010", "best")
    save(40)
    assert [p.name for p in run.checkpoint_dirs()] == ["step_000040"]
    removed = [e["path"] for e in run.manifest() if e["kind"] == "removed"]
    assert removed == ["checkpoints/step_000020", "checkpoints/step_000010", "checkpoints/step_000030"]

"""Job config validation: example configs, every error path through the real `tp config validate`, overrides, schema.

The invalid configs are checked end to end through the CLI (exit code 2, one `path: reason` line per error on
stderr); the ones whose problem needs no disk access run with `--no-disk`.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from typer.testing import CliRunner  # noqa: E402

from training_platform.cli import app  # noqa: E402
from training_platform.demo import prepare_demo  # noqa: E402
from training_platform.training.algorithms import ALGORITHMS  # noqa: E402
from training_platform.training.config import (  # noqa: E402
    ConfigError,
    FieldError,
    JobConfig,
    apply_overrides,
    load_yaml,
)
from training_platform.training.preflight import validate_config  # noqa: E402

pytestmark = pytest.mark.unit

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "configs" / "examples"
EXAMPLES = sorted(EXAMPLES_DIR.glob("*.yaml"))
COUNT_LINE_SUFFIX = "error(s); nothing was started."

# --------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def demo_data_dir(tmp_path_factory: pytest.TempPathFactory):
    """Demo model + data built once per session; TP_DATA_DIR points at it while the session lasts."""
    root = tmp_path_factory.mktemp("tp_data")
    prepare_demo(root)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TP_DATA_DIR", str(root))
        yield root


@pytest.fixture(scope="module")
def bad_files(demo_data_dir: Path) -> Path:
    """Broken dataset files next to the demo assets, referenced as `bad/<name>` in configs."""
    d = demo_data_dir / "bad"
    d.mkdir(exist_ok=True)
    good = {"messages": [{"role": "user", "content": "1+1="}, {"role": "assistant", "content": "2"}]}
    bad = {"messages": [{"role": "user", "content": "1+2="}, {"role": "robot", "content": "3"}]}
    (d / "bad_row.jsonl").write_text("\n".join(json.dumps(r) for r in (good, good, bad, good)) + "\n")
    (d / "invalid_json.jsonl").write_text(json.dumps(good) + '\n{"messages": [\n' + json.dumps(good) + "\n")
    return d


@pytest.fixture()
def runner() -> CliRunner:
    return CliRunner()


# --------------------------------------------------------------------------------------------- helpers

DELETE = object()

BASES: dict[str, dict[str, Any]] = {
    "sft": {
        "model": {"path": "demo/model"},
        "data": {"train_file": "demo/data/sft.jsonl", "max_length": 64},
        "algorithm": {"name": "sft"},
        "training": {"max_steps": 5, "per_device_batch_size": 8},
        "resources": {"device": "cpu"},
    },
    "grpo": {
        "model": {"path": "demo/model"},
        "data": {"train_file": "demo/data/rl.jsonl", "max_length": 64},
        "algorithm": {"name": "grpo", "num_generations": 4, "max_completion_length": 8},
        "rewards": [{"name": "math_answer"}],
        "training": {"max_steps": 5, "per_device_batch_size": 8},
        "resources": {"device": "cpu"},
    },
    "dpo": {
        "model": {"path": "demo/model"},
        "data": {"train_file": "demo/data/preference.jsonl", "max_length": 64},
        "algorithm": {"name": "dpo"},
        "training": {"max_steps": 5, "per_device_batch_size": 8},
        "resources": {"device": "cpu"},
    },
    "ppo": {
        "model": {"path": "demo/model"},
        "data": {"train_file": "demo/data/rl.jsonl", "max_length": 64},
        "algorithm": {"name": "ppo", "reward_model_path": "demo/reward_model"},
        "training": {"max_steps": 5, "per_device_batch_size": 8},
        "resources": {"device": "cpu"},
    },
}


def make(base: str, changes: dict[str, Any] | None = None) -> dict[str, Any]:
    """A copy of BASES[base] with `{"dotted.path": value}` changes applied (value DELETE removes the key)."""
    cfg = copy.deepcopy(BASES[base])
    for key, value in (changes or {}).items():
        *parents, leaf = key.split(".")
        node = cfg
        for part in parents:
            node = node.setdefault(part, {})
        if value is DELETE:
            del node[leaf]
        else:
            node[leaf] = value
    return cfg


def write_config(tmp_path: Path, cfg: dict[str, Any] | str, name: str = "job.yaml") -> Path:
    path = tmp_path / name
    path.write_text(cfg if isinstance(cfg, str) else yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return path


def run_validate(runner: CliRunner, path: Path, *args: str):
    return runner.invoke(app, ["config", "validate", str(path), *args])


def error_lines(result) -> list[tuple[str, str]]:
    """The `path: reason` lines the CLI printed on stderr (without the closing count line)."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines and lines[-1].endswith(COUNT_LINE_SUFFIX), result.output
    errors = [tuple(line.split(": ", 1)) for line in lines[:-1]]
    assert all(len(e) == 2 for e in errors), result.stderr
    assert lines[-1] == f"{len(errors)} {COUNT_LINE_SUFFIX}"
    return errors


def assert_invalid(result, path: str, fragment: str, *, only: bool = True) -> list[tuple[str, str]]:
    assert result.exit_code == 2, result.output
    assert "OK:" not in result.stdout
    errors = error_lines(result)
    matching = [reason for p, reason in errors if p == path and fragment in reason]
    assert matching, f"no '{path}: ...{fragment}...' line in:\n{result.stderr}"
    if only:
        assert len(errors) == 1, result.stderr
    return errors


# --------------------------------------------------------------------------------------------- valid configs


def test_every_algorithm_has_an_example():
    names = {load_yaml(str(p))["algorithm"]["name"] for p in EXAMPLES}
    assert names == set(ALGORITHMS)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_config_validates(path: Path, demo_data_dir: Path):
    raw = load_yaml(str(path))
    loaded: dict = {}
    # verl's RL needs GPUs to start (checked outside the dry run: tests/training/test_verl_engine.py)
    cfg = validate_config(raw, loaded=loaded, dry_run=raw.get("engine") == "verl")
    assert isinstance(cfg, JobConfig)
    assert cfg.algorithm.name == raw["algorithm"]["name"]
    rows, _fmt, file = loaded["data.train_file"]
    assert rows and file == demo_data_dir / raw["data"]["train_file"]


@pytest.mark.parametrize("path", EXAMPLES[:1] + EXAMPLES[-1:], ids=lambda p: p.stem)
def test_example_config_validates_through_cli(path: Path, demo_data_dir: Path, runner: CliRunner):
    result = run_validate(runner, path)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"OK: {path} (")
    assert result.stderr == ""


@pytest.mark.parametrize("base", sorted(BASES))
def test_base_configs_are_valid(base: str, demo_data_dir: Path):
    """The invalid cases below each break one thing in these; they must start out valid."""
    validate_config(make(base))


# --------------------------------------------------------------------------------------------- invalid configs

NO_DISK = ("--no-disk",)
DISK: tuple[str, ...] = ()

INVALID_CASES = [
    # --- layer 1: types (the models are strict), ranges, unknown keys, required fields
    pytest.param(
        "sft",
        {"training.learning_rate": "fast"},
        NO_DISK,
        "training.learning_rate",
        "must be a number, got 'fast'",
        id="lr-string",
    ),
    pytest.param(
        "sft",
        {"training.max_steps": "5"},
        NO_DISK,
        "training.max_steps",
        "must be an integer, got '5'",
        id="int-as-string",
    ),
    pytest.param(
        "sft", {"model.lora": {"r": 8.0}}, NO_DISK, "model.lora.r", "must be an integer, got 8.0", id="float-for-int"
    ),
    pytest.param(
        "sft",
        {"model.trust_remote_code": "yes"},
        NO_DISK,
        "model.trust_remote_code",
        "must be true or false, got 'yes'",
        id="bool-string",
    ),
    pytest.param(
        "sft", {"training.learning_rate": -0.001}, NO_DISK, "training.learning_rate", "must be > 0", id="negative-lr"
    ),
    pytest.param(
        "sft",
        {"model.lora": {"dropout": 1.5}},
        NO_DISK,
        "model.lora.dropout",
        "must be < 1.0, got 1.5",
        id="dropout-1.5",
    ),
    pytest.param(
        "sft", {"data.eval_split": 1.0}, NO_DISK, "data.eval_split", "must be < 1.0, got 1.0", id="eval-split-1"
    ),
    pytest.param(
        "sft", {"data.max_length": 4}, NO_DISK, "data.max_length", "must be >= 8, got 4", id="max-length-too-small"
    ),
    pytest.param(
        "sft",
        {"model.dtype": "fp8"},
        NO_DISK,
        "model.dtype",
        "must be one of 'auto', 'fp32', 'bf16' or 'fp16', got 'fp8'",
        id="bad-literal",
    ),
    pytest.param(
        "sft",
        {"trainig": {"max_steps": 5}},
        NO_DISK,
        "trainig",
        "unknown field (did you mean 'training'?)",
        id="unknown-top-level-key",
    ),
    pytest.param(
        "sft",
        {"training.learning_rat": 0.1},
        NO_DISK,
        "training.learning_rat",
        "unknown field (did you mean 'learning_rate'?)",
        id="unknown-nested-key",
    ),
    pytest.param(
        "sft",
        {"algorithm.num_generations": 4},
        NO_DISK,
        "algorithm.num_generations",
        "unknown field",
        id="param-of-another-algorithm",
    ),
    pytest.param(
        "sft",
        {"algorithm.name": "dpoo"},
        NO_DISK,
        "algorithm.name",
        "unknown algorithm 'dpoo'; expected one of sft, dpo,",
        id="unknown-algorithm",
    ),
    pytest.param(
        "sft",
        {"algorithm.name": DELETE},
        NO_DISK,
        "algorithm.name",
        "required field is missing",
        id="missing-algorithm-name",
    ),
    pytest.param(
        "sft", {"model.path": DELETE}, NO_DISK, "model.path", "required field is missing", id="missing-model-path"
    ),
    pytest.param(
        "sft",
        {"data.train_file": DELETE},
        NO_DISK,
        "data.train_file",
        "required field is missing",
        id="missing-train-file-field",
    ),
    pytest.param("sft", {"model.path": ""}, NO_DISK, "model.path", "must not be empty", id="empty-model-path"),
    pytest.param(
        "ppo",
        {"algorithm.reward_model_path": DELETE},
        NO_DISK,
        "algorithm.reward_model_path",
        "engine trl's PPO needs a reward model",
        id="ppo-missing-reward-model",
    ),
    pytest.param(
        "grpo",
        {"algorithm.num_generations": 1},
        NO_DISK,
        "algorithm.num_generations",
        "must be >= 2, got 1",
        id="num-generations-1",
    ),
    pytest.param(
        "sft",
        {"rewards": [{"name": "math_answer", "weight": -1.0}]},
        NO_DISK,
        "rewards[0].weight",
        "must be >= 0",
        id="negative-reward-weight",
    ),
    # --- layer 2: cross-field rules
    pytest.param(
        "grpo",
        {"algorithm.num_generations": 3},
        NO_DISK,
        "algorithm.num_generations",
        "= 8) must be divisible by num_generations (3)",
        id="grpo-batch-not-divisible",
    ),
    pytest.param(
        "grpo",
        {"data.eval_split": 0.1, "training.per_device_eval_batch_size": 6},
        NO_DISK,
        "training.per_device_eval_batch_size",
        "the eval batch (6) must be divisible",
        id="grpo-eval-batch",
    ),
    pytest.param(
        "grpo",
        {"algorithm.epsilon": 0.3, "algorithm.epsilon_high": 0.2},
        NO_DISK,
        "algorithm.epsilon_high",
        "must be >= algorithm.epsilon (0.3)",
        id="grpo-epsilon-high",
    ),
    pytest.param(
        "grpo",
        {"algorithm.max_completion_length": 128},
        NO_DISK,
        "algorithm.max_completion_length",
        "must be <= data.max_length (64), got 128",
        id="grpo-completion-longer-than-max-length",
    ),
    pytest.param(
        "sft",
        {"training.eval_steps": 10},
        NO_DISK,
        "training.eval_steps",
        "evaluation needs data.eval_file or data.eval_split > 0",
        id="eval-steps-without-eval-data",
    ),
    pytest.param(
        "sft",
        {"data.eval_file": "demo/data/sft_eval.jsonl", "data.eval_split": 0.1},
        NO_DISK,
        "data.eval_split",
        "not both",
        id="eval-file-and-eval-split",
    ),
    pytest.param(
        "sft",
        {"training.warmup_steps": 10, "training.warmup_ratio": 0.1},
        NO_DISK,
        "training.warmup_steps",
        "set warmup_steps or warmup_ratio, not both",
        id="warmup-steps-and-ratio",
    ),
    pytest.param(
        "grpo",
        {"rewards": []},
        NO_DISK,
        "rewards",
        "grpo needs at least one reward function",
        id="grpo-without-rewards",
    ),
    pytest.param(
        "sft",
        {"rewards": [{"name": "math_answer"}]},
        NO_DISK,
        "rewards",
        "sft does not use reward functions (only grpo, rloo, reinforce_pp do)",
        id="rewards-on-sft",
    ),
    pytest.param(
        "grpo",
        {"rewards": [{"name": "nope"}]},
        NO_DISK,
        "rewards[0].name",
        "unknown reward 'nope'; known: format, length_penalty, llm_judge, math_answer",
        id="unknown-reward",
    ),
    pytest.param(
        "grpo",
        {"rewards": [{"name": "math_answer"}, {"name": "overclarification_penalty", "params": {"alpha": -0.5}}]},
        NO_DISK,
        "rewards[1].params.alpha",
        "must be >= 0",
        id="negative-reward-param",
    ),
    pytest.param(
        "grpo",
        {"rewards": [{"name": "math_answer", "params": {"answer_field": 3}}]},
        NO_DISK,
        "rewards[0].params.answer_field",
        "must be a string, got 3",
        id="reward-param-type",
    ),
    pytest.param(
        "grpo",
        {"rewards": [{"name": "math_answer", "weight": 0.0}, {"name": "length_penalty", "weight": 0}]},
        NO_DISK,
        "rewards",
        "the reward weights must not all be 0",
        id="all-zero-reward-weights",
    ),
    pytest.param(
        "dpo",
        {"algorithm.loss_type": ["sigmoid", "sft"], "algorithm.loss_weights": [1.0]},
        NO_DISK,
        "algorithm.loss_weights",
        "needs one weight per loss_type (2), got 1",
        id="dpo-loss-weights-length",
    ),
    pytest.param(
        "dpo",
        {"algorithm.loss_type": ["hinge"], "algorithm.label_smoothing": 0.1},
        NO_DISK,
        "algorithm.label_smoothing",
        "only applies to the sigmoid and robust losses",
        id="dpo-label-smoothing-hinge",
    ),
    pytest.param(
        "ppo",
        {"algorithm.num_mini_batches": 3},
        NO_DISK,
        "algorithm.num_mini_batches",
        "must divide per_device_batch_size x gradient_accumulation_steps (8)",
        id="ppo-mini-batches",
    ),
    pytest.param(
        "sft", {"model.dtype": "fp16"}, NO_DISK, "model.dtype", "fp16 training needs a CUDA device", id="fp16-on-cpu"
    ),
    pytest.param(
        "sft",
        {"model.lora": {"quantization": "4bit"}},
        NO_DISK,
        "model.lora.quantization",
        "QLoRA (4bit/8bit) needs a CUDA device",
        id="qlora-on-cpu",
    ),
    pytest.param(
        "sft",
        {"algorithm.assistant_only_loss": True, "data.format": "text"},
        NO_DISK,
        "algorithm.assistant_only_loss",
        "needs conversational data, not text",
        id="sft-assistant-only-text",
    ),
    pytest.param(
        "sft",
        {"tracking.report_to": ["none", "tensorboard"]},
        NO_DISK,
        "tracking.report_to",
        "'none' cannot be combined",
        id="report-to-none-and-more",
    ),
    # --- layer 3: files, the model, dataset rows
    pytest.param(
        "sft",
        {"data.train_file": "demo/data/missing.jsonl"},
        DISK,
        "data.train_file",
        "no such file: ",
        id="missing-train-file",
    ),
    pytest.param(
        "sft",
        {"data.eval_file": "demo/data/missing_eval.jsonl"},
        DISK,
        "data.eval_file",
        "no such file: ",
        id="missing-eval-file",
    ),
    pytest.param(
        "sft",
        {"model.path": "no_such_model_dir"},
        DISK,
        "model.path",
        "no such model directory: ",
        id="missing-model-dir",
    ),
    pytest.param(
        "sft",
        {"model.path": "demo/data"},
        DISK,
        "model.path",
        "is not a Hugging Face model directory (no config.json)",
        id="model-dir-without-config",
    ),
    pytest.param(
        "ppo",
        {"algorithm.reward_model_path": "no_such_reward_model"},
        DISK,
        "algorithm.reward_model_path",
        "no such model directory",
        id="ppo-missing-reward-model-dir",
    ),
    pytest.param(
        "sft",
        {"model.lora": {"target_modules": ["nope_proj"]}},
        DISK,
        "model.lora.target_modules[0]",
        "'nope_proj' matches no linear layer of the model; available: ",
        id="lora-unknown-target-module",
    ),
    pytest.param(
        "sft",
        {"model.lora": {"target_modules": ["q_proj", "model.layers.0.mlp.nope"]}},
        DISK,
        "model.lora.target_modules[1]",
        "matches no linear layer",
        id="lora-second-target-module",
    ),
    pytest.param(
        "sft",
        {"data.max_length": 1024},
        DISK,
        "data.max_length",
        "must be <= the model's context length (512), got 1024",
        id="max-length-above-model-context",
    ),
    pytest.param(
        "sft",
        {"data.train_file": "demo/data/preference.jsonl"},
        DISK,
        "data.train_file",
        "preference.jsonl: line 1: <row>: format 'preference' cannot train this algorithm",
        id="preference-data-for-sft",
    ),
    pytest.param(
        "dpo",
        {"data.format": "kto"},
        DISK,
        "data.train_file",
        "format 'kto' cannot train this algorithm; it needs preference",
        id="explicit-format-wrong-kind",
    ),
    pytest.param(
        "sft",
        {"data.train_file": "bad/bad_row.jsonl"},
        DISK,
        "data.train_file",
        "bad_row.jsonl: line 3: messages[1].role: must be one of",
        id="bad-row",
    ),
    pytest.param(
        "sft",
        {"data.train_file": "bad/invalid_json.jsonl"},
        DISK,
        "data.train_file",
        "invalid_json.jsonl: line 2: <row>: invalid JSON",
        id="invalid-json-line",
    ),
    pytest.param(
        "grpo",
        {"rewards": [{"name": "math_answer", "params": {"answer_field": "solution"}}]},
        DISK,
        "rewards[0].params.answer_field",
        "column 'solution' is not in rl.jsonl",
        id="reward-column-missing",
    ),
    pytest.param(
        "sft",
        {"resources.device": "cuda"},
        DISK,
        "resources.device",
        "cuda was requested but no CUDA device is available",
        id="cuda-unavailable",
        marks=pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine w/o CUDA"),
    ),
]


@pytest.mark.parametrize(("base", "changes", "args", "path", "fragment"), INVALID_CASES)
def test_invalid_config_through_cli(base, changes, args, path, fragment, tmp_path, runner, demo_data_dir, bad_files):
    result = run_validate(runner, write_config(tmp_path, make(base, changes)), *args)
    assert_invalid(result, path, fragment)


def test_num_generations_message_is_exact(tmp_path, runner, demo_data_dir):
    result = run_validate(runner, write_config(tmp_path, make("grpo", {"algorithm.num_generations": 1})))
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "algorithm.num_generations: must be >= 2, got 1",
        f"1 {COUNT_LINE_SUFFIX}",
    ]


def test_errors_go_to_stderr_only(tmp_path, runner, demo_data_dir):
    result = run_validate(runner, write_config(tmp_path, make("sft", {"training.learning_rate": "x"})), *NO_DISK)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "training.learning_rate: must be a number" in result.stderr


@pytest.mark.parametrize(
    ("text", "path", "fragment"),
    [
        pytest.param("", "model", "required field is missing", id="empty-file"),
        pytest.param("- a\n- b\n", "<root>", "the config must be a mapping, got list", id="not-a-mapping"),
    ],
)
def test_invalid_config_file(text, path, fragment, tmp_path, runner, demo_data_dir):
    result = run_validate(runner, write_config(tmp_path, text), *NO_DISK)
    assert_invalid(result, path, fragment, only=False)


def test_invalid_yaml_file(tmp_path, runner):
    path = write_config(tmp_path, "model: [\n")
    result = run_validate(runner, path, *NO_DISK)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"<file>: invalid YAML in {path}: ")
    assert result.stderr.splitlines()[-1] == f"1 {COUNT_LINE_SUFFIX}"


@pytest.mark.parametrize(
    ("text", "args"),
    [
        pytest.param("model: [\n", (), id="config-file"),
        pytest.param(None, ("--set", "training.max_steps=["), id="set-value"),
    ],
)
def test_yaml_errors_are_one_line(text, args, tmp_path, runner):
    path = write_config(tmp_path, text if text is not None else make("sft"))
    result = run_validate(runner, path, *NO_DISK, *args)
    assert result.exit_code == 2
    assert len(result.stderr.splitlines()) == 2, result.stderr


def test_missing_config_file(tmp_path, runner):
    result = run_validate(runner, tmp_path / "nope.yaml")
    assert_invalid(result, "<file>", "config file not found: ")


# --------------------------------------------------------------------------------------------- edge cases


@pytest.mark.parametrize("value", ["q_proj", 5, [5]], ids=["string", "int", "list-of-int"])
def test_lora_target_modules_type_error_path(value, tmp_path, runner):
    result = run_validate(
        runner, write_config(tmp_path, make("sft", {"model.lora": {"target_modules": value}})), *NO_DISK
    )
    assert result.exit_code == 2
    paths = {p for p, _ in error_lines(result)}
    assert paths <= {"model.lora.target_modules", "model.lora.target_modules[0]"}, paths


def test_reward_params_model_validator_error_path(tmp_path, runner):
    cfg = make("grpo", {"rewards": [{"name": "length_penalty", "params": {"max_length": 4, "buffer": 8}}]})
    result = run_validate(runner, write_config(tmp_path, cfg), *NO_DISK)
    assert_invalid(result, "rewards[0].params", "buffer (8) must be < max_length (4)")


def test_bad_row_total_is_reported_when_errors_are_truncated(tmp_path, runner, demo_data_dir):
    row = {"messages": [{"role": "x", "content": 1}, {"role": "y", "content": 2}]}  # 4 problems per row
    data = tmp_path / "many_bad.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for _ in range(10)))
    result = run_validate(runner, write_config(tmp_path, make("sft", {"data.train_file": str(data)})))
    errors = assert_invalid(result, "data.train_file", "line 1: messages[0].role", only=False)
    assert ("data.train_file", "many_bad.jsonl: 10 bad rows in all") in errors


def test_unknown_reward_param_has_did_you_mean_hint(tmp_path, runner):
    cfg = make("grpo", {"rewards": [{"name": "math_answer", "params": {"answer_fild": "answer"}}]})
    result = run_validate(runner, write_config(tmp_path, cfg), *NO_DISK)
    assert_invalid(result, "rewards[0].params.answer_fild", "did you mean 'answer_field'?")


# --------------------------------------------------------------------------------------------- all errors


def test_several_type_errors_are_all_reported(tmp_path, runner):
    cfg = make(
        "sft",
        {
            "training.learning_rate": "fast",
            "trainig": 1,
            "model.lora": {"dropout": 1.5},
            "data.max_length": "64",
            "algorithm.packing": "no",
        },
    )
    result = run_validate(runner, write_config(tmp_path, cfg), *NO_DISK)
    assert result.exit_code == 2
    assert dict(error_lines(result)) == {
        "training.learning_rate": "must be a number, got 'fast'",
        "trainig": "unknown field (did you mean 'training'?)",
        "model.lora.dropout": "must be < 1.0, got 1.5",
        "data.max_length": "must be an integer, got '64'",
        "algorithm.packing": "must be true or false, got 'no'",
    }
    assert result.stderr.splitlines()[-1] == f"5 {COUNT_LINE_SUFFIX}"


def test_rule_and_disk_errors_are_all_reported(tmp_path, runner, demo_data_dir):
    cfg = make(
        "grpo",
        {
            "training.warmup_steps": 5,
            "training.warmup_ratio": 0.1,  # rule
            "algorithm.num_generations": 3,  # rule (algorithm check)
            "rewards": [{"name": "math_answer"}, {"name": "nope"}],  # rule
            "model.dtype": "fp16",  # rule
            "data.train_file": "demo/data/missing.jsonl",  # disk
            "data.max_length": 1024,  # disk (model context)
        },
    )
    result = run_validate(runner, write_config(tmp_path, cfg))
    assert result.exit_code == 2
    paths = [p for p, _ in error_lines(result)]
    assert sorted(paths) == sorted(
        [
            "training.warmup_steps",
            "algorithm.num_generations",
            "rewards[1].name",
            "model.dtype",
            "data.train_file",
            "data.max_length",
        ]
    )


def test_validate_config_raises_config_error_with_field_errors(demo_data_dir):
    with pytest.raises(ConfigError) as info:
        validate_config(
            make("sft", {"training.warmup_steps": 5, "training.warmup_ratio": 0.1, "training.eval_steps": 3}),
            check_disk=False,
        )
    errors = info.value.errors
    assert all(isinstance(e, FieldError) for e in errors)
    assert [e.path for e in errors] == ["training.warmup_steps", "training.eval_steps"]
    assert str(info.value) == "\n".join(f"{e.path}: {e.reason}" for e in errors)


def test_no_disk_skips_file_checks(tmp_path, runner):
    cfg = make("sft", {"data.train_file": "demo/data/missing.jsonl", "model.path": "no_such_model_dir"})
    result = run_validate(runner, write_config(tmp_path, cfg), "--no-disk")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("OK: ")


# --------------------------------------------------------------------------------------------- --set overrides


def test_set_override_makes_invalid_config_valid(tmp_path, runner, demo_data_dir):
    path = write_config(tmp_path, make("grpo", {"algorithm.num_generations": 3, "training.learning_rate": -1.0}))
    assert run_validate(runner, path).exit_code == 2
    result = run_validate(runner, path, "--set", "algorithm.num_generations=4", "--set", "training.learning_rate=0.001")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"OK: {path} (grpo, engine trl)")


def test_set_override_can_make_valid_config_invalid(tmp_path, runner):
    path = write_config(tmp_path, make("grpo"))
    result = run_validate(runner, path, "--no-disk", "--set", "algorithm.num_generations=1")
    assert result.stderr.splitlines()[0] == "algorithm.num_generations: must be >= 2, got 1"
    assert result.exit_code == 2


def test_set_without_equals_fails(tmp_path, runner):
    result = run_validate(runner, write_config(tmp_path, make("sft")), "--no-disk", "--set", "training.max_steps")
    assert_invalid(result, "--set", "expected KEY=VALUE, got 'training.max_steps'")


def test_set_with_unparseable_value_fails(tmp_path, runner):
    result = run_validate(runner, write_config(tmp_path, make("sft")), "--no-disk", "--set", "training.max_steps=[")
    assert result.exit_code == 2
    assert result.stderr.startswith("training.max_steps: cannot parse override value '[': ")
    assert result.stderr.splitlines()[-1] == f"1 {COUNT_LINE_SUFFIX}"


def test_set_string_value_is_still_strict(tmp_path, runner):
    result = run_validate(runner, write_config(tmp_path, make("sft")), "--no-disk", "--set", "training.max_steps='5'")
    assert_invalid(result, "training.max_steps", "must be an integer, got '5'")


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        pytest.param("a.b=5", 5, id="int"),
        pytest.param("a.b=0.5", 0.5, id="float"),
        pytest.param("a.b=5.0e-4", 5.0e-4, id="float-exponent-with-dot"),
        pytest.param("a.b=true", True, id="bool-true"),
        pytest.param("a.b=false", False, id="bool-false"),
        pytest.param("a.b=null", None, id="null"),
        pytest.param("a.b=~", None, id="null-tilde"),
        pytest.param("a.b=[q_proj, v_proj]", ["q_proj", "v_proj"], id="list"),
        pytest.param("a.b=[1, 2.5]", [1, 2.5], id="list-of-numbers"),
        pytest.param("a.b={x: 1}", {"x": 1}, id="mapping"),
        pytest.param("a.b=hello", "hello", id="string"),
        pytest.param("a.b='5'", "5", id="quoted-string"),
        pytest.param("a.b=", "", id="empty"),
        pytest.param("a.b=x=y", "x=y", id="value-with-equals"),
        pytest.param("a.b=1e-5", 1e-5, id="float-exponent-without-dot"),
    ],
)
def test_apply_overrides_parses_yaml_values(override, expected):
    value = apply_overrides({}, [override])["a"]["b"]
    assert value == expected
    assert type(value) is type(expected)


def test_apply_overrides_creates_nested_keys_and_keeps_input():
    raw = {"training": {"max_steps": 5}, "model": {"path": "m"}}
    out = apply_overrides(raw, ["training.learning_rate=0.1", "model.lora.r=4", "new.deep.key=x", " engine =trl"])
    assert out == {
        "training": {"max_steps": 5, "learning_rate": 0.1},
        "model": {"path": "m", "lora": {"r": 4}},
        "new": {"deep": {"key": "x"}},
        "engine": "trl",
    }
    assert raw == {"training": {"max_steps": 5}, "model": {"path": "m"}}  # deep copy: the input is untouched


def test_apply_overrides_later_wins_and_never_descends_into_a_scalar():
    assert apply_overrides({"model": "m"}, ["a=1", "a=2"]) == {"model": "m", "a": 2}
    with pytest.raises(ConfigError) as info:  # the same rule as the API's overrides (core/overrides.py)
        apply_overrides({"model": "m"}, ["model.path=x"])
    assert info.value.errors == [FieldError("model.path", "model is a str, not a mapping or list")]


def test_apply_overrides_without_equals_raises():
    with pytest.raises(ConfigError) as info:
        apply_overrides({}, ["training.max_steps"])
    assert info.value.errors == [FieldError("--set", "expected KEY=VALUE, got 'training.max_steps'")]


# --------------------------------------------------------------------------------------------- schema


def test_config_schema_command(runner):
    result = runner.invoke(app, ["config", "schema"])
    assert result.exit_code == 0, result.output
    schema = json.loads(result.stdout)
    assert {"model", "data", "algorithm", "training", "rewards", "resources", "tracking"} <= set(schema["properties"])
    assert {"model", "data", "algorithm"} <= set(schema["required"])
    assert schema["additionalProperties"] is False

    algorithm = schema["properties"]["algorithm"]
    mapping = algorithm["discriminator"]["mapping"]
    assert algorithm["discriminator"]["propertyName"] == "name"
    assert set(mapping) == set(ALGORITHMS)
    defs = schema["$defs"]
    assert len(algorithm["oneOf"]) == len(ALGORITHMS)
    for name, ref in mapping.items():
        definition = defs[ref.removeprefix("#/$defs/")]
        assert definition["properties"]["name"]["const"] == name
        assert definition["additionalProperties"] is False
    grpo = defs[mapping["grpo"].removeprefix("#/$defs/")]
    assert grpo["properties"]["num_generations"]["minimum"] == 2


def test_engine_rules_from_builder_capabilities_keep_their_messages():
    """data.sampling, devices and reward functions are builder capabilities now; the messages are unchanged."""

    def errors_of(raw: dict[str, Any]) -> dict[str, str]:
        with pytest.raises(ConfigError) as info:
            validate_config(raw, check_disk=False)
        return {e.path: e.reason for e in info.value.errors}

    sampling = {"strategy": "uniform"}
    errors = errors_of(make("ppo", {"data.sampling": sampling}))
    assert errors["data.sampling"] == (
        "ppo draws its rows with its own data loader: difficulty-aware sampling supports "
        "sft, dpo, kto, orpo, simpo, reward, grpo, rloo"
    )
    verl_sft = make("sft", {"engine": "verl", "data.sampling": sampling, "resources.device": "mps"})
    errors = errors_of(verl_sft)
    assert errors["data.sampling"] == (
        "difficulty-aware sampling runs on engine trl; engine verl does not support it yet"
    )
    assert errors["resources.device"] == "engine verl runs on cuda or cpu, not mps"
    errors = errors_of(make("ppo", {"algorithm.reward_model_path": DELETE}))
    assert errors == {"algorithm.reward_model_path": "engine trl's PPO needs a reward model"}
    verl_ppo = make("ppo", {"engine": "verl", "algorithm.reward_model_path": DELETE})
    assert errors_of(verl_ppo)["rewards"] == "ppo needs at least one reward function"

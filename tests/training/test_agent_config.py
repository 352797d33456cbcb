"""The job config's `agent` section (multi-turn tool calling): its schema, its rules with one field path each, the
preflight probes of its tools and the chat template, and the honest refusal while the verl agent loop is not wired
into training (docs/plans/agentic-rl.md, slice 4): an `agent` job is refused at `agent`, never run without tools."""

from __future__ import annotations

import copy
import os
import shutil
from typing import Any

import pytest
import yaml

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from typer.testing import CliRunner  # noqa: E402

from training_platform.cli import app  # noqa: E402
from training_platform.training.config import (  # noqa: E402
    ConfigError,
    effective_config,
    parse_config,
)
from training_platform.training.preflight import validate_config  # noqa: E402

pytestmark = pytest.mark.unit

TOOLS = [
    "calculator",
    {"name": "python"},
    {"name": "http_endpoint", "params": {"endpoint": "judge", "model": "m1"}},
]
RL: dict[str, Any] = {
    "engine": "verl",
    "model": {"path": "demo/model"},
    "data": {"train_file": "demo/data/rl.jsonl", "max_length": 64},
    "algorithm": {"name": "grpo", "num_generations": 4, "max_completion_length": 8},
    "rewards": [{"name": "math_answer"}],
    "training": {"max_steps": 2, "per_device_batch_size": 8},
    "resources": {"device": "cpu"},
    "agent": {"tools": ["calculator"]},
}


def job(**changes: Any) -> dict[str, Any]:
    """A copy of RL with `{"section.field": value}` changes (None removes the key)."""
    cfg = copy.deepcopy(RL)
    for key, value in changes.items():
        *parents, leaf = key.split(".")
        node = cfg
        for part in parents:
            node = node.setdefault(part, {})
        if value is None:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return cfg


def errors_of(raw: dict[str, Any], **kw: Any) -> dict[str, str]:
    kw.setdefault("check_disk", False)
    with pytest.raises(ConfigError) as info:
        validate_config(raw, **kw)
    out: dict[str, str] = {}
    for e in info.value.errors:
        out[e.path] = f"{out[e.path]} | {e.reason}" if e.path in out else e.reason
    return out


# ---------------------------------------------------------------------------------------------- schema


def test_the_section_parses_bare_names_and_fills_its_defaults():
    cfg = parse_config(job(**{"agent.tools": TOOLS}))
    agent = cfg.agent
    assert agent is not None
    assert [(t.name, t.params) for t in agent.tools] == [
        ("calculator", {}),
        ("python", {}),
        ("http_endpoint", {"endpoint": "judge", "model": "m1"}),
    ]
    assert (agent.max_turns, agent.max_tool_calls, agent.tool_timeout_s, agent.format) == (4, 3, 5.0, "hermes")
    assert (agent.tool_call_reward, agent.tool_error_reward) == (0.0, 0.0)
    effective = effective_config(cfg)
    assert effective["agent"]["tools"][0] == {"name": "calculator", "params": {}}
    assert "agent" not in effective_config(parse_config(job(agent=None))), "runs without tools record no agent key"


@pytest.mark.parametrize(
    "changes, path, fragment",
    [
        ({"agent.max_turns": 0}, "agent.max_turns", "must be >= 1, got 0"),
        ({"agent.max_turns": 17}, "agent.max_turns", "must be <= 16, got 17"),
        ({"agent.max_tool_calls": 0}, "agent.max_tool_calls", "must be >= 1"),
        ({"agent.max_tool_calls": 65}, "agent.max_tool_calls", "must be <= 64"),
        ({"agent.tool_timeout_s": 0}, "agent.tool_timeout_s", "must be > 0"),
        ({"agent.tool_timeout_s": 60.5}, "agent.tool_timeout_s", "must be <= 60"),
        ({"agent.format": "json"}, "agent.format", "must be one of 'hermes'"),
        ({"agent.tools": []}, "agent.tools", "at least 1"),
        ({"agent.tools": ["calculator"] * 17}, "agent.tools", "at most 16"),
        ({"agent.tools": [{"params": {}}]}, "agent.tools[0].name", "required field is missing"),
        ({"agent.tools": [5]}, "agent.tools[0]", ""),
        ({"agent.max_turn": 3}, "agent.max_turn", "did you mean 'max_turns'?"),
        ({"agent.tool_error_reward": -11.0}, "agent.tool_error_reward", "must be >= -10"),
        ({"agent.max_turns": "4"}, "agent.max_turns", ""),  # strict: no coercion
    ],
)
def test_schema_errors_name_their_field(changes, path, fragment):
    errors = errors_of(job(**changes))
    assert path in errors and fragment in errors[path], errors


# ---------------------------------------------------------------------------------------------- rules


@pytest.mark.parametrize("algorithm", ["grpo", "rloo", "reinforce_pp", "ppo"])
def test_a_valid_agent_is_accepted_for_each_rl_algorithm(algorithm):
    lengths = {"num_generations": 4, "max_completion_length": 8} if algorithm != "ppo" else {"response_length": 8}
    raw = job(**{"algorithm": {"name": algorithm, **lengths}})
    raw["agent"]["tools"] = TOOLS
    validate_config(raw, check_disk=False)  # wired into training: tests/training/test_verl_agent_rl.py runs one


@pytest.mark.parametrize(
    "changes",
    [
        {"engine": "trl"},  # TRL's GRPO: its rollout has no agent loop
        {"algorithm": {"name": "sft"}, "rewards": None, "data.train_file": "demo/data/sft.jsonl"},
    ],
    ids=["trl", "sft"],
)
def test_agent_needs_an_rl_algorithm_on_verl(changes):
    errors = errors_of(job(**changes))
    assert "agent" in errors, errors
    reason = errors["agent"]
    assert reason.startswith("tool calling runs in the RL rollouts of engine verl (")
    assert {"grpo", "rloo", "ppo", "reinforce_pp"} <= set(reason.split("(")[1].split(")")[0].split(", "))


def test_unknown_tool_lists_the_registered_ones():
    errors = errors_of(job(**{"agent.tools": ["calculator", "web_search"]}))
    assert errors["agent.tools[1].name"] == "unknown tool 'web_search'; known: calculator, http_endpoint, python"


def test_duplicates_are_refused():
    errors = errors_of(job(**{"agent.tools": ["calculator", "python", {"name": "calculator"}]}))
    assert errors["agent.tools[2].name"] == "'calculator' is listed twice (also agent.tools[0])"


@pytest.mark.parametrize(
    "tool, path, fragment",
    [
        ({"name": "http_endpoint"}, "agent.tools[0].params.endpoint", "required field is missing"),
        ({"name": "http_endpoint", "params": {"model": "m"}}, "agent.tools[0].params.endpoint", "required"),
        (
            {"name": "http_endpoint", "params": {"endpoint": "https://api.example.com/v1", "model": "m"}},
            "agent.tools[0].params.endpoint",
            "not a URL",
        ),
        ({"name": "python", "params": {"memory_mb": 16}}, "agent.tools[0].params.memory_mb", "must be >= 64"),
        ({"name": "python", "params": {"memory": 512}}, "agent.tools[0].params.memory", "did you mean 'memory_mb'?"),
        ({"name": "calculator", "params": {"precision": 3}}, "agent.tools[0].params.precision", "unknown field"),
    ],
)
def test_tool_params_are_checked_by_the_tool(tool, path, fragment):
    errors = errors_of(job(**{"agent.tools": [tool]}))
    assert path in errors and fragment in errors[path], errors


def test_max_tool_calls_fits_in_the_turns():
    errors = errors_of(job(**{"agent.max_turns": 2, "agent.max_tool_calls": 3}))
    assert errors["agent.max_tool_calls"] == (
        "an episode makes at most one call per turn: at most max_turns (2), got 3"
    )


@pytest.mark.parametrize(
    "key",
    [
        "actor_rollout_ref.rollout.multi_turn.max_user_turns",
        "actor_rollout_ref.rollout.multi_turn.tool_config_path",
        "actor_rollout_ref.rollout.agent.default_agent_loop",
        "actor_rollout_ref.rollout.agent.agent_loop_config_path",
    ],
)
def test_verl_overrides_cannot_set_the_agent_loop(key):
    errors = errors_of(job(**{"verl": {"overrides": {key: "x"}}}))
    assert "verl.overrides" in errors and key in errors["verl.overrides"], errors
    assert "not overridable" in errors["verl.overrides"] or "names a file" in errors["verl.overrides"]


def test_cli_exit_2_with_the_paths(tmp_path):
    raw = job(**{"agent.tools": ["calculator", "nope"], "agent.max_turns": 17})
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    result = CliRunner().invoke(app, ["config", "validate", str(path), "--no-disk"])
    assert result.exit_code == 2, result.output
    assert "agent.max_turns: must be <= 16, got 17" in result.stderr
    valid = job()
    path.write_text(yaml.safe_dump(valid, sort_keys=False))
    result = CliRunner().invoke(app, ["config", "validate", str(path), "--no-disk"])
    assert result.exit_code == 0, result.output


# ---------------------------------------------------------------------------------------------- preflight


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    from training_platform.demo import prepare_demo

    root = tmp_path_factory.mktemp("tp_data")
    prepare_demo(root)
    return root


@pytest.fixture
def on_disk(data_root, monkeypatch):
    monkeypatch.setenv("TP_DATA_DIR", str(data_root))
    monkeypatch.delenv("TP_ENDPOINTS", raising=False)
    monkeypatch.delenv("TP_ENDPOINTS_FILE", raising=False)
    return data_root


def test_preflight_checks_each_tool_here(on_disk, monkeypatch, tmp_path):
    from training_platform.evaluation import sandbox as sandbox_mod

    raw = job(**{"agent.tools": TOOLS})
    errors = errors_of(raw, check_disk=True, dry_run=True)
    assert errors["agent.tools[2].params.endpoint"] == "unknown endpoint 'judge' (known: none is defined)"
    assert set(errors) == {"agent.tools[2].params.endpoint"}, errors

    monkeypatch.setenv("TP_ENDPOINTS", '{"judge": {"base_url": "http://127.0.0.1:9/v1", "models": ["m0"]}}')
    errors = errors_of(raw, check_disk=True, dry_run=True)
    assert errors["agent.tools[2].params.model"] == "endpoint 'judge' serves 'm0'; not 'm1'"
    monkeypatch.setenv("TP_ENDPOINTS", '{"judge": {"base_url": "http://127.0.0.1:9/v1", "models": ["m1"]}}')
    validate_config(raw, check_disk=True, dry_run=True)  # valid, and nothing is sent to the endpoint

    # no bubblewrap here: the python tool fails closed, unless the operator accepts running code unisolated
    monkeypatch.setenv(sandbox_mod.ENV_BWRAP, str(tmp_path / "no-bwrap"))
    monkeypatch.delenv(sandbox_mod.ENV_ALLOW_UNSAFE, raising=False)
    try:
        sandbox_mod.detect_isolation(refresh=True)
        errors = errors_of(raw, check_disk=True, dry_run=True)
        assert errors["agent.tools[1]"].startswith("python runs the model's code in the bubblewrap sandbox, which")
        assert "TP_SANDBOX_ALLOW_UNSAFE=1" in errors["agent.tools[1]"]
        monkeypatch.setenv(sandbox_mod.ENV_ALLOW_UNSAFE, "1")
        validate_config(raw, check_disk=True, dry_run=True)
    finally:
        monkeypatch.delenv(sandbox_mod.ENV_BWRAP)
        sandbox_mod.detect_isolation(refresh=True)


def test_preflight_refuses_a_chat_template_that_does_not_show_tools(on_disk):
    model = on_disk / "no_tools_template_model"
    if not model.exists():
        shutil.copytree(on_disk / "demo" / "model", model)
        no_tools = "{%- for m in messages -%}{{- m['role'] + ': ' + m['content'] + '\\n' -}}{%- endfor -%}"
        (model / "chat_template.jinja").write_text(no_tools, encoding="utf-8")
    errors = errors_of(job(**{"model.path": str(model.relative_to(on_disk))}), check_disk=True, dry_run=True)
    assert errors["agent.tools"] == (
        "the model's chat template does not show tools to the model (calculator missing from the prompt rendered "
        "with tools=[...]): use a model whose template renders tools"
    )
    validate_config(job(), check_disk=True, dry_run=True)  # the demo template renders them

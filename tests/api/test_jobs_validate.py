"""POST /jobs/validate: what POST /jobs would say about a body, as the launch form needs it while the user types;
never a job."""

from __future__ import annotations

import pytest
from api_helpers import row_counts, valid_config

pytestmark = pytest.mark.integration


def validate(api, config, user="alice", **body):
    r = api.post("/jobs/validate", user=user, json={"config": config, **body})
    assert r.status_code == 200, r.text
    return r.json()


def test_a_valid_config_gets_its_effective_config_and_creates_nothing(sqlite_api):
    before = row_counts()
    out = validate(sqlite_api, valid_config(), name="draft")
    assert out["valid"] is True and out["errors"] == []
    effective = out["effective_config"]
    assert effective["training"]["max_steps"] == 5
    assert effective["training"]["learning_rate"] > 0, "defaults filled in"
    assert effective["resources"]["launcher"] == "local" and effective["resources"]["world_size"] == 1
    assert row_counts() == before, "no job, no event"
    memory = out["memory"]  # estimated from the model's config.json (training/memory.py)
    assert memory["device"] == "cpu" and memory["parameters"] > 0 and memory["total_gib"] > 0
    assert {"weights", "gradients", "optimizer", "activations"} <= set(memory["parts_gib"]), memory


def test_every_problem_is_listed_at_its_field_as_a_list_path(sqlite_api):
    config = valid_config(
        training={"max_steps": 5, "per_device_batch_size": 0, "learning_rate": "fast"},
        rewards=[{"name": "no_such_reward", "weight": 1.0}],
    )
    config["model"]["path"] = "../../etc"
    out = validate(sqlite_api, config)
    assert out["valid"] is False and out["effective_config"] is None, "the config does not parse"
    locs = {tuple(e["loc"]) for e in out["errors"]}
    assert ("training", "per_device_batch_size") in locs
    assert ("training", "learning_rate") in locs
    assert ("model", "path") in locs, "the path policy runs too"
    assert all(e["msg"] for e in out["errors"])


def test_list_items_are_integers_in_the_path_and_rules_keep_the_effective_config(sqlite_api):
    config = valid_config(
        algorithm={"name": "grpo", "num_generations": 4},
        data={"train_file": "demo/data/rl.jsonl", "max_length": 64},
        rewards=[{"name": "math_answer", "weight": -1.0}],
    )
    out = validate(sqlite_api, config)
    assert not out["valid"]
    assert ["rewards", 0, "weight"] in [e["loc"] for e in out["errors"]], out["errors"]

    engine = valid_config(
        engine="trl",
        algorithm={"name": "reinforce_pp"},
        data={"train_file": "demo/data/rl.jsonl", "max_length": 64},
        rewards=[{"name": "math_answer", "weight": 1.0}],
    )
    out = validate(sqlite_api, engine)
    assert [e["loc"] for e in out["errors"]] == [["engine"]], out["errors"]
    assert out["effective_config"]["algorithm"]["name"] == "reinforce_pp", "parsed: the form can still show it"


def test_warnings_say_what_would_run_but_not_as_meant(sqlite_api):
    out = validate(sqlite_api, valid_config(training={"max_steps": 5, "save_steps": 50}))
    assert out["valid"] is True
    assert any("save_steps" in w for w in out["warnings"]), out["warnings"]


def test_verl_jobs_are_checked_against_the_generated_verl_config(sqlite_api):
    pytest.importorskip("verl")
    grpo = valid_config(
        engine="verl",
        algorithm={"name": "grpo", "num_generations": 4},
        data={"train_file": "demo/data/rl.jsonl", "max_length": 64},
        rewards=[{"name": "math_answer", "weight": 1.0}],
        verl={"overrides": {"algorithm.adv_estimator": "no_such_estimator"}},
    )
    out = validate(sqlite_api, grpo)
    assert not out["valid"]
    assert [e["loc"] for e in out["errors"]] == [["verl", "overrides", "algorithm.adv_estimator"]], out["errors"]
    del grpo["verl"]
    out = validate(sqlite_api, grpo)
    assert out["valid"], out["errors"]
    assert out["effective_config"]["verl"]["rollout"] == "auto" and not any("GPU" in w for w in out["warnings"])
    assert any(w.startswith("training.lr_scheduler 'linear': verl has constant") for w in out["warnings"])
    out = validate(sqlite_api, {**grpo, "verl": {"rollout": "vllm"}})  # no vLLM on this machine
    assert [e["loc"] for e in out["errors"]] == [["verl", "rollout"]], out["errors"]
    assert "vllm is not installed here" in out["errors"][0]["msg"]


def test_a_body_that_is_not_a_job_is_a_422(sqlite_api):
    r = sqlite_api.post("/jobs/validate", user="alice", json={"name": "x"})
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == "config"


def test_the_examples_are_served_and_each_is_valid_or_says_why(sqlite_api):
    r = sqlite_api.get("/config/examples", user="alice")
    assert r.status_code == 200, r.text
    examples = {e["name"]: e for e in r.json()}
    assert {"sft_tiny", "grpo_tiny", "reinforce_pp_tiny"} <= set(examples)
    assert examples["grpo_tiny"]["algorithm"] == "grpo" and "GRPO" in examples["grpo_tiny"]["description"]
    out = validate(sqlite_api, examples["sft_tiny"]["config"])
    assert out["valid"], out["errors"]


def test_the_tools_an_agent_may_call_are_served_with_their_schemas(sqlite_api):
    """GET /config/tools is the registry as the launch form needs it; the config schema offers the same names."""
    from verl.tools.schemas import OpenAIFunctionToolSchema

    r = sqlite_api.get("/config/tools", user="alice")
    assert r.status_code == 200, r.text
    tools = {t["name"]: t for t in r.json()}
    assert {"calculator", "python", "http_endpoint"} <= set(tools)
    for name, tool in tools.items():
        OpenAIFunctionToolSchema.model_validate(tool["schema"])  # what verl's agent loop takes
        assert tool["schema"]["function"]["name"] == name and tool["description"]
    assert tools["calculator"]["schema"]["function"]["parameters"]["required"] == ["expression"]
    assert "endpoint" in tools["http_endpoint"]["params_schema"]["required"]
    schema = sqlite_api.get("/config/schema", user="alice").json()
    assert schema["$defs"]["AgentToolSection"]["properties"]["name"]["enum"] == sorted(tools)


def test_validate_reads_the_files_like_the_preflight(sqlite_api):
    """The files as the worker's preflight reads them: what would fail a second after submit is `valid: false`."""
    missing_model = valid_config()
    missing_model["model"]["path"] = "demo/no_such_model"
    out = validate(sqlite_api, missing_model)
    assert not out["valid"]
    errors = {tuple(e["loc"]): e["msg"] for e in out["errors"]}
    assert "no such model directory" in errors[("model", "path")], out["errors"]

    dpo_on_sft_rows = valid_config(algorithm={"name": "dpo"})  # sft.jsonl holds chats, DPO needs preference pairs
    out = validate(sqlite_api, dpo_on_sft_rows)
    assert not out["valid"]
    assert [e["loc"] for e in out["errors"]] and all(e["loc"] == ["data", "train_file"] for e in out["errors"])
    assert "sft.jsonl" in out["errors"][0]["msg"], out["errors"]

    missing_data = valid_config(data={"train_file": "demo/data/nothing.jsonl", "max_length": 64})
    out = validate(sqlite_api, missing_data)
    assert [(e["loc"], e["msg"].split(":")[0]) for e in out["errors"]] == [(["data", "train_file"], "no such file")]

    too_long = valid_config(data={"train_file": "demo/data/sft.jsonl", "max_length": 100_000})
    out = validate(sqlite_api, too_long)
    assert any(e["loc"] == ["data", "max_length"] and "context length" in e["msg"] for e in out["errors"]), out


def test_validate_never_runs_a_models_own_code(sqlite_api):
    config = valid_config()
    config["model"]["trust_remote_code"] = True
    config["model"]["path"] = "demo/no_such_model"  # not read: checked when the job starts
    out = validate(sqlite_api, config)
    assert out["valid"], out["errors"]
    assert any("trust_remote_code" in w and "when the job starts" in w for w in out["warnings"]), out["warnings"]


def test_agent_problems_are_listed_at_their_fields_and_a_job_with_agent_is_accepted(sqlite_api):
    """`agent` (multi-turn tool calling): its schema and rules answer at their fields; a correct one is accepted by
    POST /jobs/validate and POST /jobs alike."""
    rl = valid_config(
        engine="verl",
        algorithm={"name": "grpo", "num_generations": 4},
        data={"train_file": "demo/data/rl.jsonl", "max_length": 64},
        rewards=[{"name": "math_answer", "weight": 1.0}],
    )
    out = validate(sqlite_api, {**rl, "agent": {"tools": ["calculator"], "max_turns": 17, "tool_timeout_s": 0}})
    assert {tuple(e["loc"]) for e in out["errors"]} == {("agent", "max_turns"), ("agent", "tool_timeout_s")}

    tools = ["calculator", "web_search", {"name": "calculator"}, {"name": "http_endpoint", "params": {"model": "m"}}]
    out = validate(sqlite_api, {**rl, "agent": {"tools": tools}})
    errors = {tuple(e["loc"]): e["msg"] for e in out["errors"]}
    assert (
        errors[("agent", "tools", 1, "name")] == "unknown tool 'web_search'; known: calculator, http_endpoint, python"
    )
    assert errors[("agent", "tools", 2, "name")] == "'calculator' is listed twice (also agent.tools[0])"
    assert ("agent", "tools", 3, "params", "endpoint") in errors
    assert ("agent",) not in errors

    out = validate(sqlite_api, {**rl, "engine": "trl", "agent": {"tools": ["calculator"]}})
    assert [e["loc"] for e in out["errors"]] == [["agent"]]
    assert out["errors"][0]["msg"].startswith("tool calling runs in the RL rollouts of engine verl")

    agent = {**rl, "agent": {"tools": ["calculator", "python"], "max_turns": 3}}
    out = validate(sqlite_api, agent)
    assert out["valid"] and not out["errors"], out["errors"]
    assert out["effective_config"]["agent"]["tools"][1] == {"name": "python", "params": {}}
    r = sqlite_api.post("/jobs", user="alice", json={"name": "agentic", "config": agent})
    assert r.status_code in (200, 201), r.text

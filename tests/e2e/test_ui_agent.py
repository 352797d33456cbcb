"""Agentic RL in the UI, in Chromium against `tp up`: the launch form's "Agent (tool calling)" section (the tools of
the registry, GET /config/tools, as checkboxes; limits from the config schema; `agent:` in the config only while a
tool is ticked; the server's answer to that config shown), and the rollout browser's per-turn view of agent
episodes with its tool-error filter.

The rollouts test runs a real GRPO job (the platform's worker, the tiny demo model, one step) to its end, then
replaces its run directory's `rollouts.jsonl` with agent-episode rows in the format the verl agent loop writes
(docs/plans/agentic-rl.md, "rollouts.jsonl"), as test_ui_data_executor.py injects progress into a real job: a real
agentic run is too slow for a browser test. tests/api/test_rollouts_api.py checks how the API reads such rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from _e2e import get_job, wait, wait_text

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture
def page(signed_in_page):
    return signed_in_page


def _form_config(page) -> dict:
    """The config the form holds, as its YAML tab shows it."""
    page.get_by_test_id("tab-yaml").click()
    config = yaml.safe_load(page.get_by_test_id("job-config").input_value())
    page.get_by_test_id("tab-form").click()
    page.get_by_test_id("launch-form").wait_for()
    return config


def test_the_launch_form_offers_the_registered_tools_and_sends_the_agent_section(page, platform):
    client, _ = platform
    tools = client.get("/config/tools").json()
    assert {"calculator", "python", "http_endpoint"} <= {t["name"] for t in tools}

    page.goto(f"{page.root}/ui/#/launch")
    page.get_by_test_id("launch-form").wait_for()
    wait_text(page, "launch-source", "sft_tiny")
    assert page.get_by_test_id("field-agent").count() == 0, "no tool calling for SFT"
    page.get_by_test_id("launch-example").select_option("grpo_tiny")
    wait_text(page, "launch-source", "grpo_tiny")
    assert page.get_by_test_id("field-agent").count() == 0, "nor for GRPO under trl"
    page.get_by_test_id("field-engine").select_option("verl")

    # Every registered tool, with its description; nothing ticked, no `agent` in the config.
    page.get_by_test_id("field-agent").wait_for()
    for tool in tools:
        row = page.get_by_test_id(f"agent-tool-{tool['name']}")
        assert tool["description"] in row.inner_text()
        assert not page.get_by_test_id(f"agent-tool-{tool['name']}-enabled").is_checked()
    assert page.get_by_test_id("field-agent.max_turns").count() == 0
    assert "agent" not in _form_config(page)

    # A tool with required settings shows their inputs, generated from its params schema; unticked, they go.
    page.get_by_test_id("agent-tool-http_endpoint-enabled").check()
    page.get_by_test_id("field-agent.tools.0.params.endpoint").wait_for()
    page.get_by_test_id("field-agent.tools.0.params.model").wait_for()
    page.get_by_test_id("agent-tool-http_endpoint-enabled").uncheck()
    assert page.get_by_test_id("field-agent.tools.0.params.endpoint").count() == 0
    assert "agent" not in _form_config(page)

    # calculator and 2 turns: the config's agent section.
    page.get_by_test_id("agent-tool-calculator-enabled").check()
    page.get_by_test_id("field-agent.max_turns").fill("2")
    page.get_by_test_id("field-agent.max_tool_calls").fill("2")
    config = _form_config(page)
    assert config["agent"] == {"tools": [{"name": "calculator"}], "max_turns": 2, "max_tool_calls": 2}
    assert config["engine"] == "verl" and config["algorithm"]["name"] == "grpo"

    # What the server answers for that config is what the form shows: the refusal at `agent` next to the section,
    # or, when agent jobs are accepted, "valid" and the effective config with that agent section (the form's own
    # check, POST /jobs/validate, sent that section; no job is launched: it would hold the worker).
    checked = client.post("/jobs/validate", json={"name": "agentic", "config": config}).json()
    at_agent = [e["msg"] for e in checked["errors"] if e["loc"][:1] == ["agent"]]
    sent: list[dict] = []
    page.on("request", lambda r: sent.append(r.post_data_json) if r.url.endswith("/jobs/validate") else None)
    page.get_by_test_id("field-agent.tool_timeout_s").fill("3")
    if at_agent:
        page.get_by_test_id("field-agent-error").wait_for()
        shown = page.get_by_test_id("field-agent-error").inner_text()
        assert all(msg in shown for msg in at_agent), (shown, at_agent)
    else:
        assert checked["valid"], checked["errors"]
        wait_text(page, "validation-state", "valid")
        wait_text(page, "effective-config", "tool_timeout_s: 3")
        effective = yaml.safe_load(page.get_by_test_id("effective-config").inner_text())["agent"]
        assert [t["name"] for t in effective["tools"]] == ["calculator"]
        assert (effective["max_turns"], effective["max_tool_calls"], effective["tool_timeout_s"]) == (2, 2, 3)
        assert page.get_by_test_id("field-agent-error").count() == 0
    wait(lambda: sent and sent[-1]["config"].get("agent", {}).get("tool_timeout_s") == 3, 10, "the form's check")
    assert sent[-1]["config"]["agent"] == {**config["agent"], "tool_timeout_s": 3}

    # An error at one of the section's fields shows at that field.
    page.get_by_test_id("field-agent.max_tool_calls").fill("3")
    page.get_by_test_id("field-agent.max_tool_calls-error").wait_for()
    assert "at most max_turns" in page.get_by_test_id("field-agent.max_tool_calls-error").inner_text()

    # Unticking the last tool removes the section from the config.
    page.get_by_test_id("agent-tool-calculator-enabled").uncheck()
    assert "agent" not in _form_config(page)


def _episode(calls: list[tuple[str, str | None]], answer: str, reward: float) -> dict:
    """A row of an agent episode: a calculator call per turn (expression, its value or None: an error), then the
    final answer."""
    turns = []
    for expression, value in calls:
        ok = value is not None
        turns.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"name": "calculator", "arguments": {"expression": expression}}],
            }
        )
        turns.append(
            {
                "role": "tool",
                "name": "calculator",
                "content": value if ok else "error: not an arithmetic expression",
                "ok": ok,
                "latency_s": 0.004,
                "reward": 0.0 if ok else -0.1,
            }
        )
    turns.append({"role": "assistant", "content": answer})
    errors = sum(value is None for _, value in calls)
    return {
        "step": 1,
        "prompt": "What is 37*48?",
        "completion": answer,
        "rewards": {"math_answer": reward},
        "reward": reward - 0.1 * errors,
        "advantage": None,
        "tool_calls": len(calls),
        "tool_errors": errors,
        "turns": turns,
    }


def test_the_rollout_browser_shows_agent_turns_and_filters_on_tool_errors(page, platform):
    client, _ = platform
    config = yaml.safe_load((REPO / "configs/examples/grpo_tiny.yaml").read_text())
    config["training"].update(max_steps=1, logging_steps=1, save_steps=100, per_device_batch_size=8)
    config["algorithm"].update(num_generations=4, max_completion_length=4)
    created = client.post("/jobs", json={"name": "agent-rollouts", "config": config, "priority": 100})
    assert created.status_code == 201, created.text
    job = wait(
        lambda: (j := get_job(client, created.json()["id"]))["status"] in ("succeeded", "failed", "cancelled") and j,
        120,
        "the GRPO job to end",
        interval=0.5,
    )
    assert job["status"] == "succeeded", job.get("error")

    from training_platform.training.rundir import RunDir

    rows = [
        _episode([("37*48", "1776")], "#### 1776", 1.0),
        _episode([("37x48", None), ("37*48", "1776")], "#### 1776", 1.0),
        _episode([], "#### 1700", 0.0),
    ]
    RunDir(job["run_dir"]).rollouts_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert client.get(f"/jobs/{job['id']}/rollouts", params={"tool_errors": True}).json()["total"] == 1

    page.goto(f"{page.root}/ui/#/jobs/{job['id']}")
    page.get_by_test_id("rollouts-panel").wait_for()
    wait_text(page, "rollout-total", "3 rollouts")
    assert "1 call" in page.get_by_test_id("rollout-tools-0").inner_text()
    assert "1 error" in page.get_by_test_id("rollout-tools-1").inner_text()

    # The episode with an error, turn by turn: the call, the failed result, the retry, the answer, the reward.
    page.get_by_test_id("rollout-row-1").click()
    turns = page.get_by_test_id("rollout-detail-1").get_by_test_id("rollout-turns")
    turns.wait_for()
    assert turns.locator("[data-role]").count() == 5
    first_call = page.get_by_test_id("rollout-turn-0-call-0").inner_text()
    assert "calculator" in first_call and '{"expression":"37x48"}' in first_call
    assert "error" in page.get_by_test_id("rollout-turn-1-status").inner_text()
    assert "not an arithmetic expression" in page.get_by_test_id("rollout-turn-1").inner_text()
    assert "4 ms" in page.get_by_test_id("rollout-turn-1").inner_text()
    assert "ok" in page.get_by_test_id("rollout-turn-3-status").inner_text()
    assert "1776" in page.get_by_test_id("rollout-turn-3").inner_text()
    assert "#### 1776" in page.get_by_test_id("rollout-turn-4").inner_text()
    reward = page.get_by_test_id("rollout-episode-reward").inner_text()
    assert "0.9" in reward and "2 tool calls, 1 failed" in reward

    # The filter narrows the list to the episodes with (without) a tool error.
    page.get_by_test_id("rollout-tool-errors").select_option("true")
    wait_text(page, "rollout-total", "1 rollout")
    assert "1 error" in page.get_by_test_id("rollout-tools-0").inner_text()
    page.get_by_test_id("rollout-tool-errors").select_option("false")
    wait_text(page, "rollout-total", "2 rollouts")
    assert "error" not in page.get_by_test_id("rollouts-table").inner_text()
    page.get_by_test_id("rollout-tool-errors").select_option("")
    wait_text(page, "rollout-total", "3 rollouts")

"""engine: verl, `agent:` - our tool agent loop (engines/verl/agent) run in this process, without Ray: verl's
ToolAgentLoop machinery (Continuous Token builder, tool dispatch) with our tools, driven by a scripted server
that returns preset token ids, on the demo tokenizer; the tools YAML and the generated verl config of a dry run."""

from __future__ import annotations

import asyncio
import copy
import json
import threading
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.unit

import verl  # noqa: E402, F401 - `make setup` installs verl; without it these fail, never skip
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap  # noqa: E402
from verl.tools.tool_registry import initialize_tools_from_config  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from training_platform.data.tool_calls import render_call  # noqa: E402
from training_platform.training.engines.verl import engine  # noqa: E402
from training_platform.training.engines.verl.agent.loop import NAME, PlatformHermesParser, PlatformToolAgentLoop  # noqa: E402
from training_platform.training.engines.verl.agent.tools import (  # noqa: E402
    runtime_env_vars,
    write_tools_config,
)
from training_platform.training.preflight import validate_config  # noqa: E402
from training_platform.training.runner import dry_run  # noqa: E402

RL = {
    "model": {"path": "demo/model"},
    "data": {"train_file": "demo/data/rl.jsonl", "max_length": 320},
    "algorithm": {"name": "grpo", "num_generations": 2, "max_completion_length": 256},
    "rewards": [{"name": "math_answer"}],
    "training": {"max_steps": 1, "per_device_batch_size": 2},
    "resources": {"device": "cpu"},
    "engine": "verl",
    "agent": {"tools": ["calculator"], "max_turns": 3, "max_tool_calls": 2},
}
QUESTION = [{"role": "user", "content": "What is 37*48?"}]
CALL = render_call("calculator", {"expression": "37*48"})


@pytest.fixture(scope="module", autouse=True)
def demo(tmp_path_factory):
    from training_platform.demo import prepare_demo

    root = tmp_path_factory.mktemp("tp_verl_agent")
    prepare_demo(root)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TP_DATA_DIR", str(root))
        mp.delenv("TP_RAY_ADDRESS", raising=False)
        yield root


@pytest.fixture(scope="module")
def tokenizer(demo):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(demo / "demo" / "model")


class Scripted:
    """verl's server manager, scripted: each `generate` answers the next text (the last one repeats) as token ids
    ending in <|im_end|>, and remembers the prompt ids it was sent."""

    def __init__(self, tokenizer, texts: list[str], on_call=None):
        self.tokenizer, self.texts, self.on_call = tokenizer, list(texts), on_call
        self.prompts: list[list[int]] = []
        self.replies: list[list[int]] = []

    async def generate(self, *, request_id: str, prompt_ids: list[int], sampling_params: dict, **kwargs: Any):
        if self.on_call:
            self.on_call(len(self.prompts))
        self.prompts.append(list(prompt_ids))
        text = self.texts[min(len(self.replies), len(self.texts) - 1)]
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [
            self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        ]
        self.replies.append(ids)
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids))


def job(sections: dict[str, dict] | None = None, **agent: Any) -> dict:
    """RL with `agent` updated; `sections` updates others (e.g. {"data": {"max_length": 4096}})."""
    raw = copy.deepcopy(RL)
    raw["agent"].update(agent)
    for name, values in (sections or {}).items():
        raw[name].update(values)
    return raw


def episode(
    tmp_path: Path,
    tokenizer,
    texts: list[str],
    *,
    agent: dict | None = None,
    sections: dict[str, dict] | None = None,
    tune=None,
    on_call=None,
):
    """Run one episode of our loop, built as verl's worker builds it: the generated config, the tools from the
    written tools YAML. Returns (output, server)."""
    cfg = validate_config(job(sections, **(agent or {})), dry_run=True)
    paths = engine.planned_paths(cfg, tmp_path)
    assert cfg.agent is not None and paths.tools_config
    write_tools_config(Path(paths.tools_config), cfg.agent)
    config = engine.verl_config(cfg, paths)
    server = Scripted(tokenizer, texts, on_call)

    async def go():
        loop = PlatformToolAgentLoop(
            trainer_config=DictConfigWrap(config),
            server_manager=server,
            tokenizer=tokenizer,
            processor=None,
            dataset_cls=None,
            data_config=DictConfigWrap(config.data),
            hf_model_type="qwen2",
            tools=ToolListWrap(initialize_tools_from_config(paths.tools_config)),
        )
        if tune:
            tune(loop)
        return await loop.run({"temperature": 1.0}, raw_prompt=copy.deepcopy(QUESTION), extra_info={})

    return asyncio.run(go()), server


def tool_turns(output) -> list[dict]:
    return [t for t in output.extra_fields["agent_turns"] if t["role"] == "tool"]


def test_a_call_then_an_answer_is_one_continuous_trajectory_masked_on_the_generations(tmp_path, tokenizer):
    """(a) ids = prompt + gen1 + verl's "\\n" + tool delta + gen2, each prompt extending the last unchanged;
    (b) the mask is 1 exactly on the generations and the masked span shows the tool's result; the turns recorded."""
    output, server = episode(tmp_path, tokenizer, [CALL, "#### 1776"])
    p0, p1 = server.prompts
    gen1, gen2 = server.replies
    assert output.prompt_ids == p0
    assert p1[: len(p0) + len(gen1)] == p0 + gen1, "the second prompt extends the first with gen1, unchanged"
    newline = tokenizer.encode("\n", add_special_tokens=False)
    assert p1[len(p0) + len(gen1)] == newline[0] and len(newline) == 1, "the Qwen builder's \\n after <|im_end|>"
    delta = p1[len(p0) + len(gen1) + 1 :]
    assert output.prompt_ids + output.response_ids == p0 + gen1 + newline + delta + gen2
    assert output.response_mask == [1] * len(gen1) + [0] * (1 + len(delta)) + [1] * len(gen2)
    shown = tokenizer.decode(delta)
    assert "1776" in shown and "tool" in shown, shown
    assert "<|im_start|>assistant" in shown, "the tool turn ends with the next assistant prompt"
    fields = output.extra_fields
    assert fields["agent/generated_tokens"] == len(gen1) + len(gen2) == sum(output.response_mask)
    assert fields["agent_turns"] == [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"name": "calculator", "arguments": {"expression": "37*48"}}],
        },
        {
            "role": "tool",
            "name": "calculator",
            "arguments": {"expression": "37*48"},
            "content": "1776",
            "ok": True,
            "latency_s": fields["agent_turns"][1]["latency_s"],
            "reward": 0.0,
        },
        {"role": "assistant", "content": "#### 1776"},
    ]
    assert fields["agent_final_answer"] == "#### 1776"
    assert (fields["agent/turns"], fields["agent/tool_calls"], fields["agent/tool_errors"]) == (2, 1, 0)
    assert (fields["agent/cut"], fields["agent/malformed_calls"]) == (0, 0)
    assert 0 <= fields["agent/tool_latency_s"] < 1
    assert output.response_logprobs is not None and len(output.response_logprobs) == len(output.response_ids)


@pytest.fixture
def hanging_tool():
    """A test-only tool that blocks until released (removed from the registry after)."""
    from training_platform.training import tools

    release = threading.Event()

    @tools.register_tool("hang_for_test", tools.ToolArgs, tools.NoParams, "Never answers in time.")
    def build(params):
        def run(args, *, timeout_s: float) -> tools.ToolResult:
            release.wait(30)
            return tools.ToolResult("late", ok=True)

        return run

    yield release
    release.set()
    tools.TOOLS.pop("hang_for_test", None)


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (render_call("weather", {"city": "Paris"}), "Unknown function 'weather'"),
        ('<tool_call>{"name": "calculator", "arguments": {"expression": 37*}}</tool_call>', "malformed tool call"),
        (render_call("calculator", {"expression": 3748}), "invalid arguments"),
        (render_call("calculator", {"expression": "37*48", "x": 1}), "invalid arguments"),
    ],
    ids=["unknown_tool", "bad_json", "schema_type", "schema_extra_key"],
)
def test_a_bad_call_answers_with_an_error_counted_and_the_episode_goes_on(tmp_path, tokenizer, call, expected):
    """(c) unknown tool, bad JSON, arguments failing the schema: an error text for the model, no crash."""
    output, server = episode(tmp_path, tokenizer, [call, "#### 1776"], agent={"tool_error_reward": -0.1})
    (turn,) = tool_turns(output)
    assert expected in turn["content"] and turn["ok"] is False and turn["reward"] == -0.1
    assert expected in tokenizer.decode(server.prompts[1][len(server.prompts[0]) :]), "the model is shown the error"
    fields = output.extra_fields
    assert (fields["agent/tool_calls"], fields["agent/tool_errors"], fields["agent/turns"]) == (1, 1, 2)
    assert fields["agent/malformed_calls"] == (1 if expected == "malformed tool call" else 0)
    assert fields["agent_final_answer"] == "#### 1776" and fields["agent/cut"] == 0


def test_a_hanging_tool_is_cut_at_its_deadline(tmp_path, tokenizer, hanging_tool):
    """(c) a tool that does not answer: an error text after tool_timeout_s + the margin, counted, no crash."""
    output, server = episode(
        tmp_path,
        tokenizer,
        [render_call("hang_for_test", {}), "#### 1776"],
        agent={"tools": ["hang_for_test"], "tool_timeout_s": 0.1},
        on_call=lambda n: hanging_tool.set() if n == 1 else None,  # free the worker thread once the deadline passed
    )
    (turn,) = tool_turns(output)
    assert turn["content"] == "error: hang_for_test did not answer within 0.1 s" and turn["ok"] is False
    assert 1.0 <= turn["latency_s"] < 5
    assert output.extra_fields["agent/tool_errors"] == 1 and output.extra_fields["agent/turns"] == 2


def test_a_model_that_always_calls_is_cut_at_max_turns(tmp_path, tokenizer):
    """(d) max_turns ends the episode whatever the model asks; agent/cut says so."""
    output, server = episode(tmp_path, tokenizer, [CALL], agent={"max_turns": 2, "max_tool_calls": 2})
    fields = output.extra_fields
    assert len(server.prompts) == 2 and fields["agent/turns"] == 2
    assert (fields["agent/tool_calls"], fields["agent/cut"]) == (1, 1)
    assert fields["agent/generated_tokens"] == sum(len(r) for r in server.replies)


def test_max_tool_calls_is_enforced(tmp_path, tokenizer):
    """(e) verl stops at max_user_turns = max_tool_calls; our own count refuses a call past the budget even where
    verl's turn limit would let it through (parallel calls, no user-turn limit)."""
    output, server = episode(tmp_path, tokenizer, [CALL], agent={"max_turns": 3, "max_tool_calls": 1})
    fields = output.extra_fields
    assert (len(server.prompts), fields["agent/tool_calls"], fields["agent/cut"]) == (2, 1, 1)

    def no_turn_limit(loop):
        loop.max_user_turns = None

    output, server = episode(
        tmp_path / "own", tokenizer, [CALL], agent={"max_turns": 3, "max_tool_calls": 1}, tune=no_turn_limit
    )
    first, second = tool_turns(output)
    assert first["ok"] is True and first["content"] == "1776"
    assert second["ok"] is False and second["content"] == "error: no more tool calls in this episode (at most 1)"
    fields = output.extra_fields
    assert (fields["agent/tool_calls"], fields["agent/tool_errors"], fields["agent/turns"]) == (2, 1, 3)


@pytest.fixture(scope="module")
def isolation():
    from training_platform.evaluation.sandbox import detect_isolation

    info = detect_isolation()
    assert info.available, f"sandbox isolation unavailable: {info.reason} -- apt-get install -y bubblewrap"


@pytest.mark.parametrize(
    ("program", "ok", "expected"),
    [
        ("print(6 * 7)", True, "42\n"),
        ("import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=2)\nprint('connected')", False, "OSError"),
        ("open({escape!r}, 'w').write('x')\nprint('written')", False, "No such file or directory"),
        ("x = bytearray(1 << 30)\nprint('allocated')", False, "MemoryError"),
        # the sandbox kills it at 2 s; on a loaded machine the loop's deadline (2 s + its margin) may answer first
        ("while True: pass", False, ("[killed: it ran past 2s]", "error: python did not answer within 2 s")),
    ],
    ids=["runs", "no_network", "no_host_files", "memory_cap", "time_cap"],
)
def test_the_python_tool_keeps_the_sandbox_limits_inside_the_loop(
    tmp_path, tokenizer, isolation, program, ok, expected
):
    """The sandbox's limits inside training's loop (the agent-loop worker's code path, without Ray): the model's
    program runs in bubblewrap; a network connection, a write to a host path, a memory blow-up and an endless loop
    each come back as the call's error text, counted, and the episode goes on to its answer."""
    escape = tmp_path / "escaped.txt"
    code = program.format(escape=str(escape))
    output, _ = episode(
        tmp_path,
        tokenizer,
        [render_call("python", {"code": code}), "#### 42"],
        agent={
            "tools": [{"name": "python", "params": {"memory_mb": 256, "max_output_chars": 200}}],
            "tool_timeout_s": 2.0,
        },
        sections={"algorithm": {"max_completion_length": 480}, "data": {"max_length": 512}},  # room for the result
    )
    (turn,) = tool_turns(output)
    alternatives = expected if isinstance(expected, tuple) else (expected,)
    assert turn["ok"] is ok and any(text in turn["content"] for text in alternatives), turn
    assert not any(word in turn["content"] for word in ("connected", "written", "allocated")), turn
    assert not escape.exists(), "nothing reached the host's files"
    fields = output.extra_fields
    assert (fields["agent/tool_calls"], fields["agent/tool_errors"], fields["agent/turns"]) == (1, int(not ok), 2)
    assert fields["agent_final_answer"] == "#### 42" and fields["agent/cut"] == 0


def test_the_parser_keeps_calls_in_order_and_turns_malformed_blocks_into_calls():
    content, calls = PlatformHermesParser.parse_text(f"let me see {CALL} <tool_call>{{oops</tool_call> <tool_call>x")
    assert content == "let me see"
    assert [c.name for c in calls] == ["calculator", "<malformed tool call>", "<malformed tool call>"]
    assert json.loads(calls[0].arguments) == {"expression": "37*48"}
    assert PlatformHermesParser.parse_text("#### 12") == ("#### 12", [])


def test_the_tools_yaml_is_what_verl_loads_and_holds_no_secret(tmp_path, monkeypatch):
    monkeypatch.setenv("JUDGE_KEY", "sk-secret-123")
    monkeypatch.setenv(
        "TP_ENDPOINTS", json.dumps({"judge": {"base_url": "https://judge.example/v1", "api_key_env": "JUDGE_KEY"}})
    )
    cfg = validate_config(
        job(tools=["calculator", {"name": "http_endpoint", "params": {"endpoint": "judge", "model": "m1"}}]),
        dry_run=True,
    )
    assert cfg.agent is not None
    path = write_tools_config(tmp_path / "verl" / "tools.yaml", cfg.agent)
    text = path.read_text()
    assert "sk-secret" not in text and "JUDGE_KEY" not in text and "judge.example" not in text
    tools = initialize_tools_from_config(str(path))
    assert [t.name for t in tools] == ["calculator", "http_endpoint"]
    from training_platform.training.tools import tool_schema

    assert tools[0].tool_schema.model_dump(exclude_unset=True) == tool_schema("calculator")
    result, reward, res = asyncio.run(tools[0].execute("id", {"expression": "2**10"}))
    assert (result.text, reward, res["ok"]) == ("1024", 0.0, True) and res["latency_s"] >= 0


def test_the_ray_runtime_env_carries_what_the_tools_need_and_nothing_else(monkeypatch):
    from training_platform.training.config import AgentSection

    environ = {
        "TP_SANDBOX_ALLOW_UNSAFE": "1",
        "TP_SANDBOX_UID_BASE": "60000",
        "TP_ENDPOINTS": json.dumps({"judge": {"base_url": "https://judge.example/v1", "api_key_env": "JUDGE_KEY"}}),
        "JUDGE_KEY": "sk-1",
        "OTHER_KEY": "sk-2",
        "DATABASE_URL": "postgres://x",
    }
    agent = AgentSection.model_validate({"tools": ["calculator"]})
    assert runtime_env_vars(agent, environ) == {} and runtime_env_vars(None, environ) == {}
    agent = AgentSection.model_validate(
        {"tools": ["python", {"name": "http_endpoint", "params": {"endpoint": "judge", "model": "m"}}]}
    )
    assert runtime_env_vars(agent, environ) == {
        "TP_SANDBOX_ALLOW_UNSAFE": "1",
        "TP_SANDBOX_UID_BASE": "60000",
        "TP_ENDPOINTS": environ["TP_ENDPOINTS"],
        "JUDGE_KEY": "sk-1",
    }


def test_the_dry_run_verl_config_has_the_multi_turn_keys():
    """(f) `tp train --dry-run` of an agent job: verl's config selects our loop and its limits."""
    import yaml

    text = dry_run(job(max_turns=4, max_tool_calls=3))
    verl_yaml = yaml.safe_load(text.partition("# verl_config.yaml")[2].partition("\n")[2])
    rollout = verl_yaml["actor_rollout_ref"]["rollout"]
    assert rollout["agent"]["default_agent_loop"] == NAME
    multi_turn = rollout["multi_turn"]
    assert multi_turn["tool_config_path"] == "<run_dir>/verl/tools.yaml"
    assert (multi_turn["max_assistant_turns"], multi_turn["max_user_turns"]) == (4, 3)
    assert (multi_turn["max_parallel_calls"], multi_turn["format"], multi_turn["enable"]) == (1, "hermes", True)
    from training_platform.training.tools import MAX_RESULT_CHARS

    assert multi_turn["max_tool_response_length"] == MAX_RESULT_CHARS, "verl does not cut our tools' results again"
    plain = copy.deepcopy(RL)
    del plain["agent"]
    rollout = yaml.safe_load(dry_run(plain).partition("# verl_config.yaml")[2].partition("\n")[2])["actor_rollout_ref"][
        "rollout"
    ]
    assert rollout["agent"]["default_agent_loop"] == "single_turn_agent"
    assert rollout["multi_turn"]["tool_config_path"] is None


def test_the_loop_is_registered_under_its_name():
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry

    assert _agent_loop_registry[NAME]["_target_"].endswith("agent.loop.PlatformToolAgentLoop")

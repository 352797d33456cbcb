"""engine: verl, `agent:` - what an agent episode's record becomes, without Ray: the reward scores the final answer
(never the tools' outputs) plus the per-call rewards, the step's agent/* metrics (with the loss-mask check), and
the turns and tool counts in rollouts.jsonl rows (through verl's dump, as rl.py reads it)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

pytestmark = pytest.mark.unit

import torch  # noqa: E402
import verl  # noqa: E402, F401 - `make setup` installs verl; without it these fail, never skip

from training_platform.training.engines.verl.rewards import make_compute_score  # noqa: E402
from training_platform.training.engines.verl.rl import verl_rollout_row  # noqa: E402
from training_platform.training.engines.verl.trainer import (  # noqa: E402
    PlatformSyncTrainer,
    agent_metrics,
    agent_records,
    mask_sums,
)

CALL = {"name": "calculator", "arguments": {"expression": "37*48"}}


def episode(final: str, *, result: str = "1776", ok: bool = True, reward: float = 0.0, **counts) -> dict:
    """The extra_fields our loop (engines/verl/agent/loop.py) leaves on a trajectory: one call, then `final`."""
    turns = [
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {
            "role": "tool",
            "name": "calculator",
            "arguments": CALL["arguments"],
            "content": result,
            "ok": ok,
            "latency_s": 0.002,
            "reward": reward,
        },
        {"role": "assistant", "content": final},
    ]
    fields = {
        "agent_turns": turns,
        "agent_final_answer": final,
        "agent/turns": 2,
        "agent/tool_calls": 1,
        "agent/tool_errors": int(not ok),
        "agent/tool_latency_s": 0.002,
        "agent/cut": 0,
        "agent/malformed_calls": 0,
        "agent/generated_tokens": 40,
        "tool_rewards": [reward],
        "turn_scores": [],
    }
    return fields | counts


def decoded(final: str, result: str = "1776") -> str:
    """What verl's reward manager decodes: the whole response, the tool's output included."""
    return f"<tool_call>{json.dumps(CALL)}</tool_call>\n<tool_response>\n{result}\n</tool_response>\n{final}"


def test_the_reward_scores_the_final_answer_never_the_tools_output():
    score = make_compute_score([{"name": "math_answer", "weight": 1.0}])
    assert score("demo", decoded("I do not know"), "1776")["rewards/math_answer"] == 1.0, (
        "the hack this guards against: the decoded response ends with the tool's right number"
    )
    hacked = score("demo", decoded("I do not know"), "1776", extra_info=episode("I do not know"))
    assert hacked["rewards/math_answer"] == 0.0 and hacked["score"] == 0.0, "a tool result earns nothing"
    right = score("demo", decoded("#### 1776", result="error"), "1776", extra_info=episode("#### 1776", ok=False))
    assert right["rewards/math_answer"] == 1.0 and right["score"] == 1.0
    plain = score("demo", "#### 1776", "1776", extra_info={"index": 3})
    assert plain["score"] == 1.0 and "rewards/tool_calls" not in plain, "a single-turn job is scored as before"


def test_per_call_rewards_are_added_to_the_score_and_reported():
    score = make_compute_score([{"name": "math_answer", "weight": 2.0}, {"name": "math_answer", "weight": 2.0}])
    failed = score("demo", "x", "1776", extra_info=episode("#### 1776", ok=False, reward=-0.1))
    assert failed["rewards/tool_calls"] == pytest.approx(-0.1)
    assert failed["score"] == pytest.approx(1.0 - 0.1), "the weighted answer reward plus the calls' rewards"
    two = episode("#### 12", reward=0.05)
    two["agent_turns"] = two["agent_turns"][:2] + two["agent_turns"][1:]  # two tool turns of 0.05
    assert score("demo", "x", "1776", extra_info=two)["rewards/tool_calls"] == pytest.approx(0.1)
    no_turns = {k: v for k, v in episode("#### 1", reward=0.3).items() if k != "agent_turns"}
    assert score("demo", "x", "1", extra_info=no_turns)["rewards/tool_calls"] == pytest.approx(0.3), "verl's list"


def test_agent_metrics_from_the_episodes_records():
    fields = [
        {"reward_extra_info": {"score": 1.0}, **episode("#### 1", **{"agent/tool_calls": 2, "agent/tool_errors": 1})},
        {**episode("#### 2", **{"agent/turns": 3, "agent/cut": 1, "agent/tool_latency_s": 0.004})},
        {**episode("#### 3", **{"agent/tool_calls": 1, "agent/generated_tokens": 33})},
        {"reward_extra_info": {}},  # not an agent episode (padding, a single-turn sample): ignored
    ]
    records = agent_records(fields, [40.0, 40.0, 30.0, 7.0])
    assert records[3] == {} and records[0]["agent_turns"][1]["content"] == "1776"
    assert [r.get("agent/loss_mask_mismatch") for r in records] == [0.0, 0.0, 1.0, None]
    metrics = agent_metrics(records)
    assert metrics == pytest.approx(
        {
            "agent/turns/mean": 7 / 3,
            "agent/tool_calls/mean": 4 / 3,
            "agent/tool_error_rate": 1 / 4,
            "agent/tool_latency_s/mean": 0.008 / 3,
            "agent/malformed_calls/mean": 0.0,
            "agent/cut_ratio": 1 / 3,
            "agent/loss_mask_mismatch": 1.0,
        }
    )
    assert "agent/loss_mask_mismatch" not in agent_metrics(agent_records(fields)), "only when the mask was read"
    assert agent_metrics(agent_records([{"reward_extra_info": {}}])) == {}, "no agent: no agent metrics"
    no_calls = agent_metrics(agent_records([episode("x", **{"agent/tool_calls": 0, "agent/tool_errors": 0})]))
    assert no_calls["agent/tool_error_rate"] == 0.0


def test_loss_mask_sums_from_transfer_queues_jagged_tensors():
    masks = [torch.tensor([1, 1, 0, 0, 1]), torch.tensor([1, 0]), torch.tensor([1, 1, 1])]
    jagged = torch.nested.nested_tensor(masks, layout=torch.jagged)
    assert mask_sums(jagged) == [3.0, 1.0, 3.0]
    assert mask_sums(torch.tensor([[1, 1, 0], [0, 1, 0]])) == [2.0, 1.0]


def test_the_dump_carries_the_turns_and_rl_py_makes_them_rollout_rows(tmp_path):
    trainer = PlatformSyncTrainer.__new__(PlatformSyncTrainer)  # only the dump path: no workers
    trainer.global_steps = 3
    records = agent_records([episode("#### 1776"), episode("#### 5", ok=False)])
    trainer._agent_by_key = {"u_0_0": records[0], "u_1_0": records[1]}
    trainer._extras_by_key = {"u_0_0": {"rewards/math_answer": 1.0}, "u_1_0": {"rewards/math_answer": 0.0}}
    extra = {"uid": ["u_0_0", "u_1_0"]}
    trainer._dump_executor = ThreadPoolExecutor(max_workers=1)
    trainer._dump_futures = []
    trainer._dump_generations(["37*48="] * 2, ["..."] * 2, ["1776"] * 2, [1.0, 0.0], extra, str(tmp_path))
    trainer._shutdown_dump_executor()
    dumped = [json.loads(line) for line in (tmp_path / "3.jsonl").read_text().splitlines()]
    rows = [verl_rollout_row(entry, 3) for entry in dumped]
    assert list(rows[0])[0] == "step", "step first: the API reads it from the line's prefix"
    assert rows[0]["tool_calls"] == 1 and rows[0]["tool_errors"] == 0 and rows[1]["tool_errors"] == 1
    assert rows[0]["rewards"] == {"math_answer": 1.0}
    assert [t["role"] for t in rows[0]["turns"]] == ["assistant", "tool", "assistant"]
    assert rows[0]["turns"][0]["tool_calls"] == [CALL] and rows[0]["turns"][1]["content"] == "1776"
    plain = verl_rollout_row({"input": "1+1=", "output": "2", "score": 1.0}, 3)
    assert "turns" not in plain and "tool_calls" not in plain, "single-turn rows keep their shape"

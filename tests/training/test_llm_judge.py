"""The `llm_judge` reward against a real judge: a local OpenAI-compatible server generating with the demo model
(judge_helpers.py). The preflight probe, the counters in a real GRPO run's metrics.jsonl, a dead endpoint refused
before the run starts, and the anti-simulation trip failing a run whose judge only answers from its cache."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import yaml
from judge_helpers import JudgeServer
from training_helpers import EXAMPLES, read_metrics

from training_platform.core.endpoints import Endpoint, Endpoints
from training_platform.training.rewards.llm_judge import JudgeReward, LLMJudgeParams, probe_judge

pytestmark = pytest.mark.integration

SECRET = "sk-judge-" + "0123456789abcdef"
TEMPLATE = "Grade the answer from 0 to 9.\nQuestion: {prompt}\nAnswer: {completion}\nScore:"
JUDGE = {
    "endpoint": "local",
    "model": "demo-judge",
    "template": TEMPLATE,
    "max_score": 9.0,
    "max_tokens": 1,
    "retries": 1,
    "backoff_s": 0.05,
    "timeout_s": 30.0,
}


@pytest.fixture(scope="module")
def judge(data_dir):
    with JudgeServer(data_dir / "demo" / "model", key=SECRET) as server:
        yield server


def endpoints(url: str) -> Endpoints:
    return Endpoints([Endpoint("local", url, "JUDGE_TEST_KEY", ("demo-judge",))])


def tp_endpoints(url: str) -> dict[str, str]:
    return {
        "TP_ENDPOINTS": json.dumps(
            {"local": {"base_url": url, "api_key_env": "JUDGE_TEST_KEY", "models": ["demo-judge"]}}
        ),
        "JUDGE_TEST_KEY": SECRET,
    }


def grpo_config(tmp_path: Path, judge_params: dict, batch: int = 16, **algorithm) -> Path:
    cfg = yaml.safe_load((EXAMPLES / "grpo_tiny.yaml").read_text())
    cfg["rewards"] = [{"name": "llm_judge", "weight": 1.0, "params": judge_params}]
    cfg["algorithm"].update(algorithm)
    cfg["training"].update(max_steps=2, logging_steps=1, save_steps=100, per_device_batch_size=batch)
    path = tmp_path / "grpo_judge.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_probe_is_one_real_call_with_latency_and_score(judge, monkeypatch):
    monkeypatch.setenv("JUDGE_TEST_KEY", SECRET)
    before = judge.calls
    result = probe_judge(JUDGE, endpoints=endpoints(judge.url))
    assert result["ok"] is True and result["error"] is None, result
    assert 0.0 <= result["score"] <= 1.0 and result["latency_ms"] > 0
    assert judge.calls == before + 1 and judge.unauthorized == 0  # really asked, with the endpoint's key
    shown = json.dumps(result)
    assert SECRET not in shown and "JUDGE_TEST_KEY" not in shown and "127.0.0.1" not in shown


def test_reward_scores_a_batch_counts_calls_and_caches(judge, monkeypatch):
    monkeypatch.setenv("JUDGE_TEST_KEY", SECRET)
    reward = JudgeReward(LLMJudgeParams.model_validate({**JUDGE, "max_concurrency": 3}), endpoints=endpoints(judge.url))
    prompts = [[{"role": "user", "content": f"{i}+{i}="}] for i in range(4)]
    completions = [[{"role": "assistant", "content": str(2 * i + i % 2)}] for i in range(4)]
    before = judge.calls
    first = reward(prompts=prompts, completions=completions)
    assert all(isinstance(s, float) and 0 <= s <= 1 for s in first)
    assert judge.calls == before + 4
    again = reward(prompts=prompts, completions=completions)  # the same 4: answered by the cache
    assert again == first and judge.calls == before + 4
    m = reward.metrics()
    assert (
        m["judge/local/calls"],
        m["judge/local/cache_hits"],
        m["judge/local/billable_calls"],
        m["judge/local/errors"],
        m["judge/local/warnings"],
    ) == (8, 4, 4, 0, 0)
    assert 0 < m["judge/local/latency_p50_ms"] <= m["judge/local/latency_p95_ms"]
    # the real model's scores depend on what it is asked: a different template is a different call
    other = JudgeReward(
        LLMJudgeParams.model_validate({**JUDGE, "template": "Rate 0-9: {completion}"}), endpoints=endpoints(judge.url)
    )
    assert other.cache_key("p", "c") != reward.cache_key("p", "c")
    other(prompts=prompts[:1], completions=completions[:1])
    assert judge.calls == before + 5


def test_a_dead_endpoint_fails_preflight_at_rewards_0(tp, tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    config = grpo_config(tmp_path, {**JUDGE, "retries": 0})
    run = tmp_path / "run"
    proc = tp("train", config, "--output", run, env_extra=tp_endpoints(dead), check=2)
    out = proc.stdout + proc.stderr
    assert "rewards[0]" in out and "'local'" in out and "did not pass the probe call" in out, out
    assert "ConnectError" in out and SECRET not in out
    assert not run.exists() or not any(run.iterdir()), "the job did not start"


def test_grpo_run_logs_judge_counters_and_keeps_the_probe(tp, tmp_path, judge):
    before = judge.calls
    run = tmp_path / "run"
    tp(
        "train",
        grpo_config(tmp_path, JUDGE, batch=8, num_generations=4),
        "--output",
        run,
        env_extra=tp_endpoints(judge.url),
        check=0,
    )
    probe = json.loads((run / "judge_probe.json").read_text())
    assert len(probe) == 1 and probe[0]["reward_index"] == 0 and probe[0]["ok"] is True
    assert probe[0]["latency_ms"] > 0 and 0 <= probe[0]["score"] <= 1
    rows = [m for m in read_metrics(run) if "judge/local/calls" in m]
    assert [m["step"] for m in rows] == [1, 2]
    last = rows[-1]
    assert last["judge/local/calls"] == 16  # 2 steps x 8 completions, cumulative
    assert last["judge/local/billable_calls"] + last["judge/local/cache_hits"] == 16
    assert last["judge/local/errors"] == 0 and last["judge/local/latency_p95_ms"] > 0
    assert "rewards/llm_judge/mean" in last
    # the server really answered every billable call (+ the probe)
    assert judge.calls - before == last["judge/local/billable_calls"] + 1 and judge.unauthorized == 0
    for path in run.rglob("*"):  # the key is never written into the run directory
        if path.is_file() and path.stat().st_size < 5_000_000:
            assert SECRET.encode() not in path.read_bytes(), path


def test_a_judge_answering_from_cache_fails_the_run(tp, tmp_path, judge, data_dir):
    """One prompt repeated, near-greedy sampling: the policy writes the same completion 16 times a step. Step 1:
    15 of 16 from the cache (warning: 94% > 90%) and 16 equal scores (zero-variance warning); step 2: 100% > 95%."""
    data = data_dir / "judge_tests" / "same_prompt.jsonl"
    data.parent.mkdir(exist_ok=True)
    data.write_text(
        "".join(json.dumps({"prompt": [{"role": "user", "content": "1+1="}], "answer": "2"}) + "\n" for _ in range(32))
    )
    config = grpo_config(tmp_path, {**JUDGE, "window": 16}, temperature=0.01, max_completion_length=2)
    run = tmp_path / "run"
    proc = tp(
        "train",
        config,
        "--output",
        run,
        "--set",
        "data.train_file=judge_tests/same_prompt.jsonl",
        "--set",
        "training.max_steps=3",
        env_extra=tp_endpoints(judge.url),
        check=1,
    )
    error = json.loads((run / "error.json").read_text())
    text = json.dumps(error)
    assert "JudgeStoppedMeasuring" in text and "judge 'local'" in text and "cache-hit rate 100.0%" in text, text
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "failed" and "fail_cache_hit_rate 95%" in info["error"]
    assert any("cache-hit rate 93.8%" in w and "warn_cache_hit_rate 90%" in w for w in info["warnings"])
    assert any("zero variance" in w for w in info["warnings"])
    log = (run / "train.log").read_text()
    assert "!!! LLM JUDGE WARNING" in log and "cache-hit rate 93.8%" in log
    step1 = next(m for m in read_metrics(run) if m["step"] == 1 and "judge/local/calls" in m)
    assert (step1["judge/local/calls"], step1["judge/local/cache_hits"], step1["judge/local/warnings"]) == (16, 15, 2)
    assert SECRET not in proc.stdout + proc.stderr

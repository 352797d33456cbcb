"""The `llm_judge` reward's own logic: params bounds, the shared parser, the cache key, the template rendering and
the anti-simulation monitor's thresholds. The judge against a real generating server: tests/training/
test_llm_judge.py."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from training_platform.data.judge_parse import JudgeParse, parse_score
from training_platform.data.score import JudgeCall, JudgeConfig
from training_platform.training.rewards import REWARDS, build_reward_function
from training_platform.training.rewards.llm_judge import (
    JudgeMonitor,
    JudgeReward,
    JudgeStoppedMeasuring,
    LLMJudgeParams,
    judge_config,
    render,
)

pytestmark = pytest.mark.unit

BASE = {"endpoint": "judge", "model": "m"}


def test_registered_with_bounded_params():
    assert "llm_judge" in REWARDS
    params = build_reward_function("llm_judge", BASE).params
    assert (params.max_concurrency, params.retries, params.cache, params.window) == (4, 2, True, 64)
    assert (params.warn_cache_hit_rate, params.fail_cache_hit_rate, params.zero_variance) == (0.90, 0.95, "warn")
    bad = [
        {"endpoint": "http://evil.test/v1"},
        {"endpoint": "a b"},
        {"template": "no placeholder"},
        {"template": "{completion}" + "x" * 20_000},
        {"max_concurrency": 65},
        {"max_concurrency": 0},
        {"timeout_s": 0.0},
        {"retries": 11},
        {"window": 1},
        {"min_score": 10.0},
        {"warn_cache_hit_rate": 0.99},
        {"parse": {"regex": "(", "json_field": None}},
        {"parse": {"regex": "x", "json_field": "y"}},
        {"api_key": "sk-x"},
        {"base_url": "http://x"},
    ]
    for change in bad:
        with pytest.raises(ValidationError):
            LLMJudgeParams.model_validate({**BASE, **change})
    with pytest.raises(ValidationError, match="not a URL"):
        LLMJudgeParams.model_validate({**BASE, "endpoint": "https://api.example.com"})


def test_parse_regex_json_or_first_number():
    assert parse_score("Score: 7/10") == 7.0
    assert parse_score("no number") is None
    assert parse_score("rating=3, score=8", JudgeParse(regex=r"score=(\d+)")) == 8.0
    assert parse_score("I'd say [[6]]", JudgeParse(regex=r"\[\[\d+\]\]")) is None  # whole match is not a number
    assert parse_score('{"verdict": {"score": 4.5}}', JudgeParse(json_field="verdict.score")) == 4.5
    assert parse_score('Here: {"score": "9"} done', JudgeParse(json_field="score")) == 9.0
    assert parse_score('{"score": true}', JudgeParse(json_field="score")) is None
    assert parse_score('{"score": "NaN"}', JudgeParse(json_field="score")) is None


def test_shared_client_config_and_normalisation():
    params = LLMJudgeParams.model_validate(
        {**BASE, "min_score": 1.0, "max_score": 5.0, "retries": 3, "parse": {"json_field": "s"}}
    )
    config = judge_config(params)
    assert isinstance(config, JudgeConfig) and config.max_retries == 3 and config.parse.json_field == "s"
    from training_platform.data.score import JudgeClient

    client = JudgeClient.__new__(JudgeClient)
    client.config = config
    assert (client.normalise(1.0), client.normalise(3.0), client.normalise(9.0)) == (0.0, 0.5, 1.0)


def test_cache_key_includes_template_model_prompt_and_completion():
    reward = JudgeReward(LLMJudgeParams.model_validate(BASE))
    key = reward.cache_key("p", "c")
    assert key == JudgeReward(LLMJudgeParams.model_validate(BASE)).cache_key("p", "c")
    others = [
        JudgeReward(LLMJudgeParams.model_validate({**BASE, "template": "T {completion}"})).cache_key("p", "c"),
        JudgeReward(LLMJudgeParams.model_validate({**BASE, "model": "m2"})).cache_key("p", "c"),
        reward.cache_key("p2", "c"),
        reward.cache_key("p", "c2"),
    ]
    assert len({key, *others}) == 5


def test_render_is_one_pass():
    assert render("Q {prompt} A {completion}", "say {completion}", "42") == "Q say {completion} A 42"


def calls(*items):
    return [JudgeCall(score, cached) for score, cached in items]


def test_monitor_warns_above_90_and_fails_above_95_percent_cache_hits(caplog):
    monitor = JudgeMonitor(LLMJudgeParams.model_validate({**BASE, "window": 20}))
    monitor.record(calls(*[(i / 20, False) for i in range(2)], *[(0.5, True) for _ in range(18)]))  # 90%: not above
    assert monitor.warning_count == 0
    monitor.record(calls((0.1, True)))  # 19/20 = 95%: above warn, not above fail
    assert monitor.warning_count == 1 and "cache-hit rate 95.0%" in monitor.drain()[0]
    assert "LLM JUDGE WARNING" in caplog.text
    monitor.record(calls((0.2, False)))  # a miss in, a miss out: still 95%, warned once
    assert monitor.warning_count == 1
    with pytest.raises(
        JudgeStoppedMeasuring,
        match=r"judge 'judge' \(model 'm'\): cache-hit rate 100.0% over the "
        r"last 20 calls passed fail_cache_hit_rate 95%",
    ):
        monitor.record(calls(*[(0.3, True)] * 20))


def test_monitor_zero_variance_warns_or_fails():
    warn = JudgeMonitor(
        LLMJudgeParams.model_validate({**BASE, "window": 4, "fail_cache_hit_rate": 1.0, "warn_cache_hit_rate": 1.0})
    )
    warn.record(calls(*[(0.5, False)] * 3, (None, False)))  # an unscored call is not a score
    assert warn.warning_count == 0
    warn.record(calls((0.5, False)))
    assert warn.warning_count == 1 and "zero variance" in warn.warnings[0]
    strict = JudgeMonitor(LLMJudgeParams.model_validate({**BASE, "window": 4, "zero_variance": "fail"}))
    with pytest.raises(JudgeStoppedMeasuring, match="the last 4 scores are all 0.5"):
        strict.record(calls(*[(0.5, False)] * 4))

"""Quality scores: heuristics, perplexity under the demo model, a simulated OpenAI-compatible judge / reward model
(counters, cache, retries, API key from env), and filters by threshold or top-k."""

from __future__ import annotations

import json

import httpx
import pytest
from data_helpers import read_jsonl, write_jsonl

from training_platform.core.endpoints import Endpoint, Endpoints, UnknownEndpoint
from training_platform.data.formats import DatasetError
from training_platform.data.score import (
    SCORES_KEY,
    JudgeClient,
    JudgeConfig,
    filter_scores,
    heuristic_scores,
    score_file,
)

# The operator's endpoints these tests name (the judge's key variable is JUDGE_KEY; "plain" has none).
ENDPOINTS = Endpoints(
    [
        Endpoint("judge", "http://judge.test/v1", "JUDGE_KEY", ("judge-1",)),
        Endpoint("plain", "http://judge.test/v1"),
        Endpoint("rm", "http://rm.test/v1"),
    ]
)

GOOD = "Paris is the capital of France. It lies on the Seine and is known for the Louvre and the Eiffel Tower."


@pytest.mark.unit
def test_heuristic_scores():
    good = heuristic_scores(GOOD)
    spam = heuristic_scores(" ".join(["buy now"] * 30))
    symbols = heuristic_scores("$$$ ### !!! ??? *** ok")
    assert good["words"] == len(GOOD.split()) and good["quality"] > 0.9
    assert spam["top_2gram_char_frac"] > 0.8 and spam["quality"] < good["quality"]
    assert symbols["special_ratio"] > 0.8 and symbols["quality"] < good["quality"]
    assert heuristic_scores("")["quality"] < 0.5
    assert set(good) == {
        "chars",
        "words",
        "alnum_ratio",
        "special_ratio",
        "digit_ratio",
        "dup_line_frac",
        "top_2gram_char_frac",
        "unique_word_ratio",
        "quality",
    }


class FakeJudge:
    """An OpenAI-compatible server: answers `Score: N` where N is the number of words mod 11, or a reward."""

    def __init__(self, fail_first: int = 0):
        self.requests: list[httpx.Request] = []
        self.fail_first = fail_first

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if len(self.requests) <= self.fail_first:
            return httpx.Response(503, json={"error": "busy"})
        body = json.loads(request.content)
        if request.url.path.endswith("/chat/completions"):
            text = body["messages"][0]["content"].split("### Example\n", 1)[1].split("\n\n### Score")[0]
            return httpx.Response(
                200,
                json={"choices": [{"message": {"role": "assistant", "content": f"Score: {len(text.split()) % 11}"}}]},
            )
        # vLLM's /pooling answer (the platform's own, proved in tests/api/test_pooling.py, has the same shape)
        return httpx.Response(
            200,
            json={
                "id": "pool-1",
                "object": "list",
                "created": 0,
                "model": body["model"],
                "data": [{"index": 0, "object": "pooling", "data": [len(body["input"]) / 10]}],
                "usage": {"prompt_tokens": 1, "total_tokens": 1, "completion_tokens": 0},
            },
        )


@pytest.mark.unit
def test_judge_client_counts_calls_cache_hits_and_latency(monkeypatch, tmp_path):
    monkeypatch.setenv("JUDGE_KEY", "secret-123")
    server = FakeJudge()
    config = JudgeConfig(endpoint="judge", model="judge-1", cache_path=str(tmp_path / "cache.jsonl"))
    client = JudgeClient(config, endpoints=ENDPOINTS, transport=httpx.MockTransport(server))
    assert client.score("one two three") == 0.3
    assert client.score("one two three") == 0.3  # cached
    assert client.score("one two three four five") == 0.5
    report = client.report()
    client.close()
    assert (report["rows"], report["requests"], report["cache_hits"], report["errors"]) == (3, 2, 1, 0)
    assert report["authenticated"] is True and report["endpoint"] == "judge"
    assert "secret-123" not in json.dumps(report) and "JUDGE_KEY" not in json.dumps(report)
    assert "judge.test" not in json.dumps(report)  # users see reports: the endpoint's name, not its URL
    assert report["latency_total_s"] >= 0 and report["latency_mean_s"] >= 0
    assert server.requests[0].headers["authorization"] == "Bearer secret-123"
    assert json.loads(server.requests[0].content)["model"] == "judge-1"
    # a new client reuses the persisted cache: no request at all
    again = JudgeClient(config, endpoints=ENDPOINTS, transport=httpx.MockTransport(server))
    assert again.score("one two three") == 0.3
    assert (again.report()["requests"], again.report()["cache_hits"]) == (0, 1)
    again.close()


@pytest.mark.unit
def test_judge_retries_server_errors_then_gives_up():
    server = FakeJudge(fail_first=2)
    client = JudgeClient(
        {"endpoint": "plain", "model": "m", "max_retries": 2},
        endpoints=ENDPOINTS,
        transport=httpx.MockTransport(server),
    )
    assert client.score("a b") == 0.2
    assert client.report()["requests"] == 3 and client.report()["errors"] == 0
    failing = JudgeClient(
        {"endpoint": "plain", "model": "m", "max_retries": 1},
        endpoints=ENDPOINTS,
        transport=httpx.MockTransport(FakeJudge(fail_first=99)),
    )
    assert failing.score("a b") is None
    assert failing.report()["errors"] == 1 and "503" in failing.report()["last_error"]
    assert failing.report()["authenticated"] is False


@pytest.mark.unit
def test_reward_mode():
    """Parsing of a /pooling answer only: the reward path against a real served reward model is proved by
    tests/api/test_pooling.py::test_reward_scorer_through_the_named_endpoint."""
    client = JudgeClient(
        {"endpoint": "rm", "model": "rm", "mode": "reward"},
        endpoints=ENDPOINTS,
        transport=httpx.MockTransport(FakeJudge()),
    )
    assert client.score_name == "reward"
    assert client.score("abcdefghij") == 1.0


@pytest.mark.unit
def test_judge_config_rejects_unknown_keys():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        JudgeConfig.model_validate({"endpoint": "x", "model": "m", "temprature": 0})
    for field in ("base_url", "api_key_env"):  # where a keyed call goes is the operator's, not the config's
        with pytest.raises(ValidationError, match=f"`{field}` is not accepted: name an endpoint"):
            JudgeConfig.model_validate({"endpoint": "x", "model": "m", field: "http://evil.test"})


@pytest.mark.unit
def test_judge_endpoint_must_be_known_and_serve_the_model():
    with pytest.raises(UnknownEndpoint, match="unknown endpoint 'nope'") as info:
        JudgeClient({"endpoint": "nope", "model": "m"}, endpoints=ENDPOINTS)
    assert info.value.field == "judge.endpoint"
    with pytest.raises(ValueError, match="endpoint 'judge' serves 'judge-1'; not 'other'") as info:
        JudgeClient({"endpoint": "judge", "model": "other"}, endpoints=ENDPOINTS)
    assert info.value.field == "judge.model"


@pytest.mark.unit
def test_score_file_with_simulated_judge_and_filters(tmp_path):
    rows = [
        {"prompt": "Tell me about Paris.", "completion": GOOD},
        {"prompt": "Spam?", "completion": " ".join(["buy now"] * 30)},
        {"prompt": "Short?", "completion": "Yes."},
    ]
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    report = score_file(
        src,
        tmp_path / "scored.jsonl",
        judge={"endpoint": "plain", "model": "j"},
        judge_transport=httpx.MockTransport(FakeJudge()),
        endpoints=ENDPOINTS,
        report_path=tmp_path / "r.json",
    )
    scored = read_jsonl(tmp_path / "scored.jsonl")
    assert [{k: v for k, v in r.items() if k != SCORES_KEY} for r in scored] == rows
    assert all({"quality", "judge"} <= set(r[SCORES_KEY]) for r in scored)
    assert report["judge"]["requests"] == 3 and report["scores"]["quality"]["count"] == 3
    assert json.loads((tmp_path / "r.json").read_text())["rows"] == 3

    top = filter_scores(tmp_path / "scored.jsonl", tmp_path / "top.jsonl", by="quality", top_k=1)
    assert top["output_rows"] == 1 and read_jsonl(tmp_path / "top.jsonl")[0]["completion"] == GOOD
    above = filter_scores(tmp_path / "scored.jsonl", tmp_path / "above.jsonl", by="quality", min_value=0.9)
    assert [r["prompt"] for r in read_jsonl(tmp_path / "above.jsonl")] == ["Tell me about Paris."]
    assert above["input_rows"] == 3
    with pytest.raises(DatasetError, match="no row has this score"):
        filter_scores(tmp_path / "scored.jsonl", tmp_path / "x.jsonl", by="perplexity", min_value=1)
    with pytest.raises(ValueError, match="give --min, --max or --top-k"):
        filter_scores(tmp_path / "scored.jsonl", tmp_path / "x.jsonl", by="quality")
    assert not (tmp_path / "x.jsonl").exists()

"""The playground and the OpenAI-compatible route, answered by a real inference worker process (the command line
`tp up` runs: solo pool, queue `inference`) generating with the tiny demo model, against the real local Redis on a
private db index. The API runs in-process (TestClient) on SQLite.

Order matters at the end of the module: `test_stuck_worker_503` freezes the worker (SIGSTOP) and
`test_no_worker_503` stops it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from api_helpers import (
    Api,
    database,
    inference_worker,
    live_inference_workers,
    running_api,
    set_status,
    stop_process_group,
)

from training_platform.db import crud
from training_platform.db.models import Checkpoint, User
from training_platform.db.session import session_scope

pytestmark = pytest.mark.integration

REDIS_URL = os.environ.get("TP_TEST_INFERENCE_REDIS_URL", "redis://127.0.0.1:6379/10")
PICKUP_S = 3.0
HELLO = [{"role": "user", "content": "What is 2+3?"}]


@dataclass
class Served:
    api: Api
    worker: subprocess.Popen
    log_file: Path
    job: int = 0  # alice's job: final/ + checkpoint step 10 (on disk) + step 5 (rotated away)
    bare_job: int = 0  # alice's job without a final model
    model_id: int = 0  # alice's registered model (not shared)
    model_name: str = ""
    extra: dict = field(default_factory=dict)

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")


def _uid() -> str:
    return uuid.uuid4().hex[:8]


def _job(api: Api, *, final: bool) -> int:
    demo = api.data_dir / "demo" / "model"
    with session_scope() as s:
        job_id = crud.create_job(
            s, owner=s.get(User, api.user_ids["alice"]), name=f"play-{_uid()}", config={"algorithm": {"name": "sft"}}
        ).id
    run_dir = api.data_dir / "runs" / f"job-{job_id}-play-{_uid()}"
    (run_dir / "checkpoints").mkdir(parents=True)
    if final:
        shutil.copytree(demo, run_dir / "final")
        shutil.copytree(demo, run_dir / "checkpoints" / "step_000010")
    set_status(job_id, "succeeded" if final else "running", run_dir=str(run_dir))
    if final:
        with session_scope() as s:
            s.add(
                Checkpoint(
                    job_id=job_id,
                    step=10,
                    path=str(run_dir / "checkpoints" / "step_000010"),
                    sha256="0" * 64,
                    size_bytes=1,
                )
            )
            s.add(
                Checkpoint(
                    job_id=job_id,
                    step=5,
                    path=str(run_dir / "checkpoints" / "step_000005"),
                    sha256="0" * 64,
                    size_bytes=1,
                    removed=True,
                )
            )
    return job_id


@pytest.fixture(scope="module")
def served(data_dir, tmp_path_factory) -> Iterator[Served]:
    settings = {
        "REDIS_URL": REDIS_URL,
        "TP_INFERENCE_PICKUP_TIMEOUT": str(PICKUP_S),
        "TP_INFERENCE_TIMEOUT": "60",
        "TP_INFERENCE_CACHE": "2",
    }
    with (
        database("sqlite", tmp_path_factory.mktemp("db_play")) as url,
        running_api(data_dir, url, **settings) as api,  # the worker inherits its settings (data dir, broker)
        inference_worker(REDIS_URL, tmp_path_factory.mktemp("inference"), "inference-test") as (worker, log_file),
    ):
        srv = Served(api=api, worker=worker, log_file=log_file)
        srv.job, srv.bare_job = _job(api, final=True), _job(api, final=False)
        srv.model_name = f"play-model-{_uid()}"
        r = api.post("/models", json={"name": srv.model_name, "path": "demo/model"})
        assert r.status_code == 201, r.text
        srv.model_id = r.json()["id"]
        yield srv


def _generate(srv: Served, user: str = "alice", **body):
    body = {
        "model": {"job_id": srv.job, "checkpoint": "final"},
        "messages": HELLO,
        "max_new_tokens": 16,
        "temperature": 0.9,
        "top_p": 0.95,
        "seed": 7,
        **body,
    }
    return srv.api.post("/playground/generate", user=user, json=body)


def _sse(srv: Served, path: str, body: dict, user: str = "alice") -> list[tuple[str | None, str]]:
    """(event name, data) of every event of a streamed answer."""
    events, name = [], None
    with srv.api.client.stream("POST", f"/api/v1{path}", json=body, headers=srv.api.h(user)) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("event: "):
                name = line[len("event: ") :]
            elif line.startswith("data: "):
                events.append((name, line[len("data: ") :]))
                name = None
    return events


# ---------------------------------------------------------------------------------------------- the playground


def test_generate_reply_and_seed(served: Served):
    r = _generate(served)
    assert r.status_code == 200, r.text
    reply = r.json()
    assert reply["model"] == f"job-{served.job}/final"
    assert reply["text"] and reply["finish_reason"] in ("stop", "length")
    usage = reply["usage"]
    assert usage["prompt_tokens"] > 0 and 0 < usage["completion_tokens"] <= 16
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert reply["timings"]["queue_s"] < PICKUP_S
    again = _generate(served).json()
    assert again["text"] == reply["text"], "same seed, same model: the same text"
    assert again["timings"]["cached"] is True  # the worker kept the model loaded
    other = _generate(served, seed=8).json()
    assert other["text"] != reply["text"]


def test_generate_stream(served: Served):
    plain = _generate(served, seed=11).json()
    events = _sse(
        served,
        "/playground/generate",
        {
            "model": {"job_id": served.job},
            "messages": HELLO,
            "max_new_tokens": 16,
            "temperature": 0.9,
            "top_p": 0.95,
            "seed": 11,
            "stream": True,
        },
    )
    tokens = [json.loads(data)["token"] for name, data in events if name is None]
    assert len(tokens) >= 2, events  # piece by piece, not one blob
    name, last = events[-1]
    assert name == "done", events
    done = json.loads(last)
    assert "".join(tokens) == done["text"] == plain["text"]
    assert done["finish_reason"] == plain["finish_reason"] and done["usage"] == plain["usage"]


def test_checkpoint_and_registered_model(served: Served):
    r = _generate(served, model={"job_id": served.job, "checkpoint": "step_000010"})
    assert r.status_code == 200, r.text
    assert r.json()["model"] == f"job-{served.job}/step_000010"
    r = _generate(served, model={"model_id": served.model_id}, temperature=0)
    assert r.status_code == 200, r.text
    assert r.json()["model"] == served.model_name
    assert _generate(served, model={"model_id": served.model_id}, temperature=0).json()["text"] == r.json()["text"]


def test_invisible_or_missing_is_404(served: Served):
    assert _generate(served, user="bob").status_code == 404  # alice's job
    assert _generate(served, user="root").status_code == 200  # an admin may
    assert _generate(served, user="bob", model={"model_id": served.model_id}).status_code == 404  # not shared
    for model, words in [
        ({"job_id": served.job, "checkpoint": "step_000099"}, "no checkpoint at step 99"),
        ({"job_id": served.job, "checkpoint": "step_000005"}, "rotated away"),
        ({"job_id": served.bare_job}, "no final model"),
        ({"job_id": 2_000_000_000}, "job 2000000000 not found"),
        ({"model_id": 2_000_000_000}, "not found"),
    ]:
        r = _generate(served, model=model)
        assert r.status_code == 404 and words in r.json()["detail"], (model, r.text)


@pytest.mark.parametrize(
    "change, loc",
    [
        ({"temperature": 2.5}, "temperature"),
        ({"temperature": -0.1}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"max_new_tokens": 5000}, "max_new_tokens"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"seed": -1}, "seed"),
        ({"seed": 2**40}, "seed"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "user", "content": "x" * 30_000}] * 3}, "messages"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
        ({"model": {}}, "model"),
        ({"model": {"job_id": 1, "model_id": 1}}, "model"),
        ({"model": {"job_id": 1, "checkpoint": "latest"}}, "model.checkpoint"),
        ({"stream": "yes"}, "stream"),
        ({"top_k": 5}, "top_k"),
    ],
)
def test_bad_values_are_422_with_the_field(served: Served, change, loc):
    r = _generate(served, **change)
    assert r.status_code == 422, r.text
    assert loc in [item["loc"] for item in r.json()["detail"]], r.text


def test_prompt_longer_than_the_context_is_422(served: Served):
    long = [{"role": "user", "content": " ".join(["12+34"] * 2000)}]  # far beyond the 512 tokens of the demo model
    r = _generate(served, messages=long)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == "messages" and "context" in r.json()["detail"][0]["msg"]


# ---------------------------------------------------------------------------------------------- OpenAI-compatible


def test_openai_chat_completion(served: Served):
    name = f"job-{served.job}/final"
    body = {
        "model": name,
        "messages": [{"role": "system", "content": "Be brief."}, *HELLO],
        "max_tokens": 12,
        "temperature": 0.8,
        "seed": 3,
    }
    r = served.api.post("/openai/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["object"] == "chat.completion" and out["model"] == name and out["id"].startswith("chatcmpl-")
    assert isinstance(out["created"], int)
    [choice] = out["choices"]
    assert choice["index"] == 0 and choice["message"]["role"] == "assistant" and choice["message"]["content"]
    assert choice["finish_reason"] in ("stop", "length")
    usage = out["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] and usage["completion_tokens"]
    text = choice["message"]["content"]

    # the same request streamed: role chunk, content chunks, finish chunk, usage chunk, [DONE]
    events = _sse(
        served, "/openai/v1/chat/completions", {**body, "stream": True, "stream_options": {"include_usage": True}}
    )
    assert events[-1] == (None, "[DONE]")
    chunks = [json.loads(data) for _, data in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == name for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    content = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert content == text
    assert chunks[-2]["choices"][0]["finish_reason"] == choice["finish_reason"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == usage

    # n choices; a stop string cuts the text before it (same seed: the same sampling up to there)
    r = served.api.post("/openai/v1/chat/completions", json={**body, "n": 2})
    assert [c["index"] for c in r.json()["choices"]] == [0, 1] and r.json()["choices"][0]["message"]["content"] == text
    stop = text[3:5]
    r = served.api.post("/openai/v1/chat/completions", json={**body, "stop": [stop]})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == text[: text.find(stop)]
    assert r.json()["choices"][0]["finish_reason"] == "stop"

    # a registered model by name and a checkpoint; other users' models are 404; bad values 422 with the field
    for model in (served.model_name, f"job-{served.job}/step_000010"):
        assert served.api.post("/openai/v1/chat/completions", json={**body, "model": model}).status_code == 200
    assert served.api.post("/openai/v1/chat/completions", user="bob", json=body).status_code == 404
    assert served.api.post("/openai/v1/chat/completions", json={**body, "model": "nope"}).status_code == 404
    for change, loc in [
        ({"temperature": 3}, "temperature"),
        ({"n": 17}, "n"),
        ({"max_tokens": 4096}, "max_tokens"),
        ({"presence_penalty": 1}, "presence_penalty"),
        ({"tools": []}, "tools"),
        ({"stop": ["a"] * 5}, "stop"),
    ]:
        r = served.api.post("/openai/v1/chat/completions", json={**body, **change})
        assert r.status_code == 422 and loc in [e["loc"] for e in r.json()["detail"]], (change, r.text)


def test_openai_models_list(served: Served):
    names = lambda user: {m["id"] for m in served.api.get("/openai/v1/models?limit=1000", user=user).json()["data"]}  # noqa: E731
    alice = names("alice")
    assert {f"job-{served.job}/final", f"job-{served.job}/step_000010", served.model_name} <= alice
    assert f"job-{served.job}/step_000005" not in alice  # rotated away
    assert not any(n.startswith(f"job-{served.bare_job}/") for n in alice)  # no model yet
    assert f"job-{served.job}/final" in names("root")
    bob = names("bob")
    assert not any(n.startswith(f"job-{served.job}/") for n in bob) and served.model_name not in bob
    r = served.api.get("/openai/v1/models")
    assert r.json()["object"] == "list" and all(m["object"] == "model" for m in r.json()["data"])


def test_openai_client_library(served: Served):
    import openai  # the official client (the dev extra installs it)

    client = openai.OpenAI(
        base_url="http://testserver/api/v1/openai/v1", api_key=served.api.tokens["alice"], http_client=served.api.client
    )
    out = client.chat.completions.create(model=f"job-{served.job}/final", messages=HELLO, max_tokens=8, seed=1)
    assert out.choices[0].message.content and out.usage.completion_tokens > 0


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TOOL_TURNS = [
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_abc", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_abc", "content": "12 C"},
]
TRAINING_TURNS = [  # the same conversation as training holds it (object arguments, no ids)
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
    {"role": "tool", "content": "12 C"},
]


def _openai_client(served: Served):
    import openai

    return openai.OpenAI(
        base_url="http://testserver/api/v1/openai/v1", api_key=served.api.tokens["alice"], http_client=served.api.client
    )


def test_openai_client_tools(served: Served):
    """The official client sends tools, an earlier call and its result; the worker renders them with the model's
    chat template exactly as training does (the prompt's token count is that of `apply_chat_template(training
    conversation, tools=)`), and answers. tool_choice "none": no tools shown, the reply is not parsed."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(served.api.data_dir / "demo" / "model")
    expected = lambda **kw: len(  # noqa: E731
        tok.apply_chat_template(TRAINING_TURNS, add_generation_prompt=True, return_dict=True, **kw)["input_ids"]
    )
    client = _openai_client(served)
    model = f"job-{served.job}/final"
    out = client.chat.completions.create(
        model=model, messages=TOOL_TURNS, tools=[WEATHER], tool_choice="auto", max_tokens=8, seed=1, temperature=0
    )
    [choice] = out.choices
    assert choice.finish_reason in ("stop", "length", "tool_calls") and choice.message.role == "assistant"
    if choice.finish_reason != "tool_calls":  # the random demo model all but never writes a well-formed call
        assert choice.message.tool_calls is None and choice.message.content is not None
    assert out.usage.prompt_tokens == expected(tools=[WEATHER])
    out = client.chat.completions.create(
        model=model, messages=TOOL_TURNS, tools=[WEATHER], tool_choice="none", max_tokens=8, seed=1, temperature=0
    )
    assert out.usage.prompt_tokens == expected() < expected(tools=[WEATHER])
    assert out.choices[0].message.tool_calls is None and out.choices[0].finish_reason in ("stop", "length")


def test_openai_tool_calls_reply(served: Served, monkeypatch):
    """A generation holding a hermes call (stubbed at the inference queue: the demo model will not write one)
    reaches the official client as `tool_calls`, `finish_reason: tool_calls`; the worker gets the tools."""
    from training_platform.api import inference_client
    from training_platform.data.tool_calls import render_call

    seen: list = []

    class Stub:
        request_id = "stub"

        async def result(self):
            text = "Checking.\n" + render_call("get_weather", {"city": "Zürich"})
            return {
                "prompt_tokens": 9,
                "choices": [{"index": 0, "text": text, "finish_reason": "stop", "completion_tokens": 5}],
            }

        async def close(self):
            pass

    async def start(request, user_id):
        seen.append(request)
        return Stub()

    monkeypatch.setattr(inference_client, "start", start)
    out = _openai_client(served).chat.completions.create(
        model=f"job-{served.job}/final", messages=TOOL_TURNS, tools=[WEATHER], max_tokens=8
    )
    [choice] = out.choices
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Checking."
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_") and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Zürich"}
    [request] = seen
    assert request.tools == [WEATHER]
    assert request.messages[1]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
    assert request.messages[2] == {"role": "tool", "content": "12 C", "tool_call_id": "call_abc"}


def test_openai_tools_422(served: Served):
    body = {"model": f"job-{served.job}/final", "messages": TOOL_TURNS, "tools": [WEATHER], "max_tokens": 4}
    bad_schema = {"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}
    many = [{"type": "function", "function": {"name": f"t{i}"}} for i in range(33)]
    for change, loc, words in [
        ({"tool_choice": "required"}, "tool_choice", "constrained decoding"),
        ({"tool_choice": {"type": "function", "function": {"name": "get_weather"}}}, "tool_choice", "named function"),
        ({"tools": many}, "tools", "at most 32"),
        ({"tools": [bad_schema]}, "tools[0].function.parameters", "type: object"),
        ({"stream": True}, "stream", "not supported yet"),
    ]:
        r = served.api.post("/openai/v1/chat/completions", json={**body, **change})
        assert r.status_code == 422, (change, r.text)
        [error] = [e for e in r.json()["detail"] if e["loc"] == loc] or [None]
        assert error is not None and words in error["msg"], (change, r.text)
    # tool_choice "none" streams: nothing to parse
    events = _sse(served, "/openai/v1/chat/completions", {**body, "tool_choice": "none", "stream": True})
    assert events[-1] == (None, "[DONE]")

    # a model whose chat template ignores tools: refused on `tools` by the worker, not served blind
    blind = served.api.data_dir / "demo" / f"blind-{_uid()}"
    shutil.copytree(served.api.data_dir / "demo" / "model", blind)
    (blind / "chat_template.jinja").write_text(
        "{%- for m in messages -%}{{- '<|im_start|>' + m['role'] + '\\n' + (m['content'] or '') + '<|im_end|>\\n' -}}"
        "{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
    )
    r = served.api.post(
        "/models", json={"name": f"blind-{_uid()}", "path": str(blind.relative_to(served.api.data_dir))}
    )
    assert r.status_code == 201, r.text
    r = served.api.post("/openai/v1/chat/completions", json={**body, "model": r.json()["name"]})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == "tools", r.text
    assert "ignores `tools`" in r.json()["detail"][0]["msg"]


def test_evaluation_backend_on_the_platform_endpoint(served: Served, monkeypatch):
    """The evaluation's OpenAI backend, pointed at this route as an operator's TP_ENDPOINTS entry would be (the
    token as its key), gets the platform model's replies: n samples, seeded."""
    from training_platform.core.endpoints import make_endpoint
    from training_platform.evaluation.generation import GenerationRequest, OpenAIBackend, SamplingParams

    monkeypatch.setenv("TP_SELF_KEY", served.api.tokens["alice"])
    endpoint = make_endpoint("self", {"base_url": "http://testserver/api/v1/openai/v1", "api_key_env": "TP_SELF_KEY"})
    backend = OpenAIBackend(
        endpoint, f"job-{served.job}/final", max_concurrency=2, max_retries=0, transport=served.api.client._transport
    )
    try:
        params = SamplingParams(max_new_tokens=8, temperature=0.8, n=3, seed=4)
        out = backend.generate([GenerationRequest(messages=HELLO)] * 2, params)
    finally:
        backend.close()
    assert [len(gens) for gens in out] == [3, 3]
    assert [g.text for g in out[0]] == [g.text for g in out[1]]  # same request, same seed
    assert len({g.text for g in out[0]}) > 1  # three samples of one seeded stream


def test_reward_model_is_refused(served: Served):
    r = served.api.post("/models", json={"name": f"play-reward-{_uid()}", "path": "demo/reward_model"})
    assert r.status_code == 201, r.text
    r = _generate(served, model={"model_id": r.json()["id"]})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == "model", r.text
    assert "classifier" in r.json()["detail"][0]["msg"]


def test_generation_timeout_504(served: Served, monkeypatch):
    """Past TP_INFERENCE_TIMEOUT the worker stops generating and the API answers 504 (an error event when
    streaming)."""
    from training_platform.core.settings import get_settings

    monkeypatch.setenv("TP_INFERENCE_TIMEOUT", "0.3")
    get_settings.cache_clear()
    try:
        body = {"max_new_tokens": 480, "temperature": 0}  # greedy on the demo model: ~2 s, no early end
        t0 = time.monotonic()
        r = _generate(served, **body)
        assert r.status_code == 504 and "TP_INFERENCE_TIMEOUT=0.3s" in r.json()["detail"], r.text
        assert time.monotonic() - t0 < 2.5
        events = _sse(
            served, "/playground/generate", {"model": {"job_id": served.job}, "messages": HELLO, "stream": True, **body}
        )
        name, data = events[-1]
        assert name == "error" and json.loads(data)["status"] == 504, events[-3:]
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
    assert _generate(served).status_code == 200


# ---------------------------------------------------------------------------------------------- no worker


def test_stuck_worker_503(served: Served):
    """A worker that does not take the request (frozen): 503 after TP_INFERENCE_PICKUP_TIMEOUT; once it runs
    again it drops the abandoned request, and the next one is answered."""
    os.killpg(served.worker.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        r = _generate(served)
        elapsed = time.monotonic() - t0
    finally:
        os.killpg(served.worker.pid, signal.SIGCONT)
    assert r.status_code == 503 and "within TP_INFERENCE_PICKUP_TIMEOUT" in r.json()["detail"], r.text
    assert PICKUP_S <= elapsed < PICKUP_S + 3
    r = _generate(served)
    assert r.status_code == 200, r.text
    deadline = time.monotonic() + 10
    while "already abandoned" not in served.log() and "expired" not in served.log().lower():
        assert time.monotonic() < deadline, served.log()[-3000:]
        time.sleep(0.2)


def test_no_worker_503(served: Served):
    stop_process_group(served.worker)  # a stopping worker takes itself off the list
    assert live_inference_workers(REDIS_URL) == 0
    t0 = time.monotonic()
    r = _generate(served)
    assert r.status_code == 503 and "no inference worker is running" in r.json()["detail"], r.text
    r = served.api.post("/openai/v1/chat/completions", json={"model": f"job-{served.job}/final", "messages": HELLO})
    assert r.status_code == 503
    assert time.monotonic() - t0 < 2

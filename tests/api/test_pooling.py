"""A reward model served for real behind `/api/v1/openai/v1/pooling` (vLLM's /pooling shape), and the data factory's
reward scorer (`JudgeClient`, `mode: reward`) and a `score` data job calling it through an operator-named endpoint.

The API runs in this process twice over the same database and Redis: a TestClient (to arrange users, models,
datasets and jobs) and a real HTTP server (uvicorn on a 127.0.0.1 port, in a thread) that the endpoint named in
TP_ENDPOINTS points at. Scoring runs in a real inference worker process (the command line `tp up` runs) with the
demo reward model (`demo/reward_model`: a Qwen2 sequence classifier with one label). Every score is compared with the
model's own score computed here with plain transformers on the same text.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from api_helpers import Api, database, inference_worker, run_data_job, running_api, set_status

from training_platform.db import crud
from training_platform.db.models import User
from training_platform.db.session import session_scope

pytestmark = pytest.mark.integration

REDIS_URL = os.environ.get("TP_TEST_POOLING_REDIS_URL", "redis://127.0.0.1:6379/11")
KEY_VAR = "TP_TEST_POOLING_KEY"
TEXTS = [
    "What is 2+3?\n5",
    "What is 2+3?\n7",
    "Alice has 3 apples and Bob gives her 5 more. How many apples does she have?\n8",
    "hello",
]


@dataclass
class Served:
    api: Api
    url: str  # the real HTTP server's root
    worker: subprocess.Popen
    log_file: Path
    reward_name: str  # alice's registered model over demo/reward_model
    lm_name: str  # alice's registered causal LM (demo/model)
    reward_job: int  # alice's reward job whose final/ is the reward model

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")

    @property
    def reward_dir(self) -> Path:
        return self.api.data_dir / "demo" / "reward_model"


def direct_scores(model_dir: Path, texts: list[str]) -> list[float]:
    """The reward model's score of each text with plain transformers (float32, CPU): the number to match."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, dtype=torch.float32).eval()
    assert model.config.num_labels == 1
    out = []
    with torch.inference_mode():
        for text in texts:
            out.append(model(**tokenizer(text, return_tensors="pt")).logits[0, 0].item())
    return out


def _uid() -> str:
    return uuid.uuid4().hex[:8]


def _reward_job(api: Api) -> int:
    """A succeeded reward job of alice's whose final/ is the demo reward model."""
    with session_scope() as s:
        job_id = crud.create_job(
            s, owner=s.get(User, api.user_ids["alice"]), name=f"rm-{_uid()}", config={"algorithm": {"name": "reward"}}
        ).id
    run_dir = api.data_dir / "runs" / f"job-{job_id}-rm-{_uid()}"
    (run_dir / "checkpoints").mkdir(parents=True)
    shutil.copytree(api.data_dir / "demo" / "reward_model", run_dir / "final")
    set_status(job_id, "succeeded", run_dir=str(run_dir))
    return job_id


class _Server:
    """The API app on a real 127.0.0.1 socket (uvicorn in a thread of this process)."""

    def __init__(self):
        import uvicorn

        from training_platform.api.app import create_app

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(create_app(), log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> _Server:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "the HTTP server did not start"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)
        self.sock.close()


@pytest.fixture(scope="module")
def served(data_dir, tmp_path_factory) -> Iterator[Served]:
    from training_platform.core.settings import get_settings

    settings = {
        "REDIS_URL": REDIS_URL,
        "TP_INFERENCE_PICKUP_TIMEOUT": "10",
        "TP_INFERENCE_TIMEOUT": "60",
        "TP_INFERENCE_CACHE": "2",
        "TP_MIN_FREE_DISK_MB": "1",
    }
    with (
        database("sqlite", tmp_path_factory.mktemp("db_pool")) as url,
        running_api(data_dir, url, **settings) as api,  # the worker inherits its settings (data dir, broker)
        inference_worker(REDIS_URL, tmp_path_factory.mktemp("inference_pool"), "inference-pool") as (worker, log_file),
        _Server() as http,
    ):
        mp = pytest.MonkeyPatch()
        try:
            names = {}
            for kind, path in (("reward", "demo/reward_model"), ("lm", "demo/model")):
                names[kind] = f"pool-{kind}-{_uid()}"
                r = api.post("/models", json={"name": names[kind], "path": path})
                assert r.status_code == 201, r.text
            # The operator's endpoint: the platform's own OpenAI-compatible root, alice's token as its key
            mp.setenv(
                "TP_ENDPOINTS",
                json.dumps({"self": {"base_url": f"{http.url}/api/v1/openai/v1", "api_key_env": KEY_VAR}}),
            )
            mp.setenv(KEY_VAR, api.tokens["alice"])
            get_settings.cache_clear()  # the endpoints are read through the (cached) settings
            yield Served(
                api=api,
                url=http.url,
                worker=worker,
                log_file=log_file,
                reward_name=names["reward"],
                lm_name=names["lm"],
                reward_job=_reward_job(api),
            )
        finally:
            mp.undo()
            get_settings.cache_clear()


# ---------------------------------------------------------------------------------------------- the route


def test_pooling_answers_in_vllm_shape_with_the_models_scores(served: Served):
    import httpx

    expected = direct_scores(served.reward_dir, TEXTS)
    assert len({round(x, 4) for x in expected}) == len(TEXTS)  # the texts score differently: a real comparison
    headers = {"Authorization": f"Bearer {served.api.tokens['alice']}"}
    with httpx.Client(base_url=served.url, headers=headers, timeout=60) as http:
        r = http.post("/api/v1/openai/v1/pooling", json={"model": served.reward_name, "input": TEXTS})
        assert r.status_code == 200, r.text
        body = r.json()
        assert set(body) == {"id", "object", "created", "model", "data", "usage"}
        assert body["object"] == "list" and body["model"] == served.reward_name and body["id"].startswith("pool-")
        assert isinstance(body["created"], int)
        assert [d["index"] for d in body["data"]] == list(range(len(TEXTS)))
        assert all(d["object"] == "pooling" and len(d["data"]) == 1 for d in body["data"])
        assert [d["data"][0] for d in body["data"]] == pytest.approx(expected, abs=1e-4)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(served.reward_dir)
        tokens = sum(len(tokenizer(t)["input_ids"]) for t in TEXTS)
        assert body["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0}

        # one string; a reward job's final model by its job name scores the same
        one = http.post(
            "/api/v1/openai/v1/pooling", json={"model": f"job-{served.reward_job}/final", "input": TEXTS[1]}
        )
        assert one.status_code == 200, one.text
        assert one.json()["data"] == [{"index": 0, "object": "pooling", "data": [pytest.approx(expected[1], abs=1e-4)]}]


def test_pooling_refusals(served: Served):
    api = served.api
    post = lambda body, user="alice": api.post("/openai/v1/pooling", user=user, json=body)  # noqa: E731
    r = post({"model": served.lm_name, "input": "hi"})  # a causal LM generates; it has no score head
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == "model", r.text
    assert "/pooling serves sequence-classification models" in r.json()["detail"][0]["msg"]
    assert post({"model": served.reward_name, "input": "hi"}, user="bob").status_code == 404  # alice's, not shared
    assert post({"model": "nope", "input": "hi"}).status_code == 404
    for body, loc in (
        ({"model": served.reward_name, "input": []}, "input"),
        ({"model": served.reward_name, "input": ["x"] * 65}, "input"),
        ({"model": served.reward_name, "input": "x", "encoding_format": "base64"}, "encoding_format"),
        ({"model": served.reward_name, "input": "x", "dimensions": 3}, "dimensions"),
    ):
        r = post(body)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"].startswith(loc), (body, r.text)
    # and chat completions refuse the reward model
    r = api.post(
        "/openai/v1/chat/completions",
        json={"model": served.reward_name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
    )
    assert r.status_code == 422 and "classifier" in r.json()["detail"][0]["msg"], r.text


# ---------------------------------------------------------------------------------------------- the scorer


def test_reward_scorer_through_the_named_endpoint(served: Served):
    """JudgeClient `mode: reward` (the data factory's scorer) resolves the operator's endpoint `self` from
    TP_ENDPOINTS and posts {"model", "input"} to its /pooling: the scores are the model's."""
    from training_platform.data.score import JudgeClient

    client = JudgeClient({"endpoint": "self", "model": served.reward_name, "mode": "reward", "max_retries": 0})
    try:
        scores = [client.score(text) for text in TEXTS]
        assert client.score(TEXTS[0]) == scores[0]  # cached: no second request
        report = client.report()
    finally:
        client.close()
    assert scores == pytest.approx(direct_scores(served.reward_dir, TEXTS), abs=1e-4)
    assert report["errors"] == 0 and report["requests"] == len(TEXTS) and report["cache_hits"] == 1
    assert report["authenticated"] is True and report["mode"] == "reward"


def test_score_data_job_calls_the_served_reward_model(served: Served):
    """A dataset version scored by a `score` data job whose judge is the served reward model (mode reward), keeping
    the top 2 rows by reward: every row's stored reward is the model's score of its text."""
    from training_platform.data.text import row_text

    api = served.api
    rows = [
        {"messages": [{"role": "user", "content": f"What is {a}+{b}?"}, {"role": "assistant", "content": str(c)}]}
        for a, b, c in ((2, 3, 5), (2, 3, 7), (10, 7, 17), (4, 4, 9))
    ]
    content = "".join(json.dumps(r) + "\n" for r in rows).encode()
    accepted = api.post(
        "/datasets", files={"file": ("rm.jsonl", content, "application/octet-stream")}, data={"name": f"rm-{_uid()}"}
    )
    assert accepted.status_code == 202, accepted.text
    run_data_job(accepted.json()["job"]["id"])
    ingest = api.get(f"/jobs/{accepted.json()['job']['id']}").json()
    assert ingest["status"] == "succeeded", ingest
    dataset_id, version_id = ingest["config"]["result"]["dataset_id"], ingest["config"]["result"]["version_id"]

    judge = {"endpoint": "self", "model": served.reward_name, "mode": "reward", "max_retries": 0}
    r = api.post(
        f"/datasets/{dataset_id}/versions/{version_id}/operations",
        json={"operation": "score", "params": {"judge": judge, "by": "reward", "top_k": 2}},
    )
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    run_data_job(job_id, timeout=120)
    job = api.get(f"/jobs/{job_id}").json()
    assert job["status"] == "succeeded", (job, served.log()[-3000:])

    items = api.get(f"/datasets/{dataset_id}/versions", params={"job_id": job_id}).json()["items"]
    assert len(items) == 1
    scored = api.get(f"/datasets/{dataset_id}/versions/{items[0]['id']}").json()
    report = scored["report"]["judge"]
    assert report["endpoint"] == "self" and report["errors"] == 0 and report["requests"] == len(rows)
    kept = [item["row"] for item in api.get(f"/datasets/{dataset_id}/versions/{scored['id']}/rows").json()["items"]]

    texts = [row_text(row, "messages") for row in rows]
    expected = direct_scores(served.reward_dir, texts)
    top2 = sorted(range(len(rows)), key=lambda i: expected[i], reverse=True)[:2]
    assert sorted(r["messages"][1]["content"] for r in kept) == sorted(rows[i]["messages"][1]["content"] for i in top2)
    for row in kept:
        i = next(j for j, original in enumerate(rows) if original["messages"] == row["messages"])
        assert row["_scores"]["reward"] == pytest.approx(expected[i], abs=1e-4)

"""The whole platform as a user meets it: `tp up` on the embedded default (SQLite + embedded Redis), then curl-like
HTTP calls: submit -> running -> live metrics -> checkpoints -> succeeded; cancel; the preflight gate; auth."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import yaml
from _e2e import get_job as _job
from _e2e import wait as _wait

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def _config(**training) -> dict:
    config = yaml.safe_load((REPO / "configs/examples/sft_tiny.yaml").read_text())
    config["training"].update({"logging_steps": 1, "save_steps": 10, **training})
    config["training"].pop("eval_steps", None)
    config["data"].pop("eval_file", None)
    return config


def test_submit_train_watch_and_succeed(platform):
    client, _ = platform
    response = client.post("/jobs", json={"name": "sft over http", "config": _config(max_steps=60)})
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["status"] == "queued"

    seen_live = []

    def finished():
        current = _job(client, job["id"])
        if current["status"] == "running":
            series = client.get(f"/jobs/{job['id']}/metrics", params={"names": "loss"}).json()["series"]
            if series.get("loss"):
                seen_live.append(len(series["loss"]))
        return current if current["status"] in ("succeeded", "failed", "cancelled") else None

    final = _wait(finished, 300, "the job to finish", interval=0.3)
    assert final["status"] == "succeeded", final
    assert seen_live, "metrics were readable through the API while the job ran"

    loss = client.get(f"/jobs/{job['id']}/metrics", params={"names": "loss,lr"}).json()["series"]
    steps = [step for step, _ in loss["loss"]]
    assert steps == list(range(1, 61)), "a contiguous history, no step twice"
    assert loss["loss"][-1][1] < loss["loss"][0][1], "the loss went down"
    assert len(loss["lr"]) == 60

    checkpoints = client.get(f"/jobs/{job['id']}/checkpoints").json()
    live = [c["step"] for c in checkpoints if not c["removed"]]
    assert live[-1] == 60 and all(len(c["sha256"]) == 64 for c in checkpoints)
    events = [e["to_status"] for e in client.get(f"/jobs/{job['id']}/events").json()]
    assert events[:3] == ["queued", "preflight", "running"] and events[-1] == "succeeded"
    logs = client.get(f"/jobs/{job['id']}/logs", params={"tail": 50}).json()["lines"]
    assert any("run succeeded" in line for line in logs)


def test_cancel_a_running_job_keeps_a_checkpoint(platform):
    client, _ = platform
    job = client.post("/jobs", json={"name": "to cancel", "config": _config(max_steps=100000)}).json()
    _wait(lambda: _job(client, job["id"])["current_step"] >= 3, 180, "the job to train a few steps")
    response = client.post(f"/jobs/{job['id']}/cancel")
    assert response.status_code == 200, response.text
    final = _wait(
        lambda: (j := _job(client, job["id"]))["status"] in ("cancelled", "failed", "succeeded") and j,
        120,
        "the job to stop",
    )
    assert final["status"] == "cancelled", final
    checkpoints = [c for c in client.get(f"/jobs/{job['id']}/checkpoints").json() if not c["removed"]]
    assert checkpoints and checkpoints[-1]["step"] == final["current_step"]


def test_preflight_gate_stops_a_job_with_a_missing_dataset(platform):
    client, _ = platform
    config = _config(max_steps=5)
    config["data"]["train_file"] = "demo/data/does_not_exist.jsonl"
    job = client.post("/jobs", json={"name": "missing data", "config": config}).json()
    final = _wait(
        lambda: (j := _job(client, job["id"]))["status"] in ("failed", "succeeded") and j, 120, "the preflight gate"
    )
    assert final["status"] == "failed"
    assert final["preflight"]["ok"] is False
    assert any(e["loc"] == "data.train_file" for e in final["preflight"]["errors"])
    assert final["started_at"] is None or final["current_step"] == 0


def test_requests_without_a_valid_token_are_refused(platform):
    client, _ = platform
    base = str(client.base_url).rstrip("/")
    assert httpx.get(f"{base}/jobs").status_code == 401
    assert httpx.get(f"{base}/jobs", headers={"Authorization": "Bearer tp_wrong"}).status_code == 401
    assert client.get("/jobs").status_code == 200

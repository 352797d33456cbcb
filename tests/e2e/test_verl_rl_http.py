"""verl RL as a platform job over HTTP (`tp up`, the embedded default): a GRPO job under `engine: verl` trains
through the worker (verl's driver on a private Ray, the hf rollout), its metrics and rollouts are served to the job
page; another is cancelled mid-run and everything it started is gone within 30 s."""

from __future__ import annotations

import time

import pytest
import verl  # noqa: F401 - proves a feature: `make setup` installs verl; without it this fails, never skips
from _e2e import get_job, running_tp_up, wait
from process_marks import marked_processes, new_mark

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def grpo(max_steps: int) -> dict:
    return {
        "engine": "verl",
        "model": {"path": "demo/model", "dtype": "fp32"},
        "data": {"train_file": "demo/data/rl.jsonl", "max_length": 64},
        "algorithm": {"name": "grpo", "num_generations": 4, "max_completion_length": 6},
        "rewards": [{"name": "math_answer", "weight": 1.0}],
        "training": {"max_steps": max_steps, "per_device_batch_size": 8, "logging_steps": 1, "save_steps": 2},
        "resources": {"device": "cpu"},
    }


def test_a_verl_grpo_job_trains_over_http_and_another_is_cancelled(tmp_path_factory):
    mark = new_mark()  # in every process `tp up` starts, the jobs' Ray included
    with running_tp_up(tmp_path_factory.mktemp("tp_up_verl"), **mark) as (client, _):
        response = client.post("/jobs", json={"name": "verl grpo", "config": grpo(2)})
        assert response.status_code == 201, response.text
        job_id = response.json()["id"]
        final = wait(
            lambda: (j := get_job(client, job_id))["status"] in ("succeeded", "failed", "cancelled") and j,
            600,
            "the verl job to finish",
            interval=1,
        )
        assert final["status"] == "succeeded", final
        assert final["current_step"] == 2
        series = client.get(f"/jobs/{job_id}/metrics", params={"names": "reward"}).json()["series"]
        assert [step for step, _ in series["reward"]] == [1, 2]
        rollouts = client.get(f"/jobs/{job_id}/rollouts").json()
        assert rollouts["steps"] == [1, 2] and rollouts["items"], rollouts
        assert "math_answer" in rollouts["items"][0]["rewards"], rollouts["items"][0]

        job_id = client.post("/jobs", json={"name": "verl cancel", "config": grpo(10_000)}).json()["id"]
        wait(lambda: get_job(client, job_id)["current_step"] >= 1, 600, "the verl job to train a step", interval=1)
        cancelled_at = time.monotonic()
        assert client.post(f"/jobs/{job_id}/cancel").status_code == 200
        final = wait(
            lambda: (j := get_job(client, job_id))["status"] in ("cancelled", "failed", "succeeded") and j,
            120,
            "the verl job to stop",
            interval=0.5,
        )
        assert final["status"] == "cancelled", final
        ray = lambda: marked_processes(mark, containing="ray")  # noqa: E731 - the job's Ray, not tp up's own
        wait(lambda: not ray(), 30, "every process of the job's Ray to exit", interval=0.5)
        assert time.monotonic() - cancelled_at < 30, "cancel stops the driver and every actor within 30 s"

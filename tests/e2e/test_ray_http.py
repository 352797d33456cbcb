"""A job submitted over HTTP with `num_nodes: 2` runs on a Ray cluster (2 local nodes made here, loopback only) and
can be cancelled there: `tp up` with TP_RAY_ADDRESS, the API validates the launcher, the worker's `tp train` drives
Ray Train workers."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
import yaml
from _e2e import get_job as _job
from _e2e import job_ended, running_tp_up
from _e2e import wait as _wait

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

import ray.cluster_utils  # noqa: E402, F401 - a dependency: without it this fails, never skips

REPO = Path(__file__).resolve().parents[2]
from ray_fixtures import CLUSTER_CPUS, LOOPBACK  # noqa: E402 - Ray's processes and clients stay on 127.0.0.1


@pytest.fixture(scope="module")
def ray_platform(tmp_path_factory, ray_cluster):
    """`tp up` naming the session's 2-node cluster (tests/ray_fixtures.py) in TP_RAY_ADDRESS."""
    with running_tp_up(tmp_path_factory.mktemp("tp_up_ray"), TP_RAY_ADDRESS=ray_cluster.address, **LOOPBACK) as up:
        yield up


def _config(max_steps: int) -> dict:
    config = yaml.safe_load((REPO / "configs/examples/sft_tiny.yaml").read_text())
    config["training"].update(
        {"logging_steps": 1, "save_steps": max_steps, "max_steps": max_steps, "per_device_batch_size": 4}
    )
    config["training"].pop("eval_steps", None)
    config["data"].pop("eval_file", None)
    config["resources"] = {"num_nodes": 2, "device": "cpu"}
    return config


def test_a_two_node_job_succeeds_and_another_is_cancelled(ray_platform):
    """The job that succeeds is engine verl's SFT (TRL's runs on Ray in tests/training/test_ray.py and behind
    `tp up --ray` below); the cancelled one is TRL's."""
    client, _ = ray_platform
    response = client.post("/jobs", json={"name": "verl on ray", "config": {**_config(6), "engine": "verl"}})
    assert response.status_code == 201, response.text
    job_id = response.json()["id"]
    final = job_ended(client, job_id, 300, "the Ray job to finish", interval=0.5)
    assert final["status"] == "succeeded", final
    dist = final["distributed"]
    assert (dist["launcher"], dist["num_nodes"], dist["world_size"]) == ("ray", 2, 2)
    assert [r["state"] for r in dist["ranks"]] == ["finished", "finished"]
    loss = client.get(f"/jobs/{job_id}/metrics", params={"names": "loss"}).json()["series"]["loss"]
    assert [step for step, _ in loss] == list(range(1, 7))
    cluster = client.get("/monitoring/ray").json()  # the monitoring page's Ray panel
    assert (cluster["configured"], cluster["error"], cluster["nodes_alive"]) == (True, None, 2), cluster
    assert cluster["cpus"]["total"] == CLUSTER_CPUS
    assert [n["ip"] for n in cluster["nodes"]] == ["127.0.0.1", "127.0.0.1"]

    job_id = client.post("/jobs", json={"name": "ray cancel", "config": _config(100000)}).json()["id"]
    _wait(lambda: _job(client, job_id)["current_step"] >= 2, 300, "the Ray job to train a few steps", interval=0.5)
    assert client.post(f"/jobs/{job_id}/cancel").status_code == 200
    final = _wait(
        lambda: (j := _job(client, job_id))["status"] in ("cancelled", "failed", "succeeded") and j,
        120,
        "the Ray job to stop",
        interval=0.5,
    )
    assert final["status"] == "cancelled", final
    checkpoints = [c for c in client.get(f"/jobs/{job_id}/checkpoints").json() if not c["removed"]]
    assert checkpoints and checkpoints[-1]["step"] == final["current_step"]


def test_tp_up_ray_runs_a_local_head_that_trains_and_dies_with_it(tmp_path_factory):
    """`tp up --ray`: a supervised Ray head (loopback, token auth) that jobs with `launcher: ray` run on; nothing of
    it is left once tp up stops."""
    import psutil

    data_dir = tmp_path_factory.mktemp("tp_up_local_ray")
    with running_tp_up(data_dir, "--ray") as (client, _):
        token_file = data_dir / "ray" / "auth_token"
        assert token_file.is_file() and (token_file.stat().st_mode & 0o777) == 0o600
        # The head takes the cores tp up may use (make test gives each xdist worker its share): as many workers.
        cores = len(os.sched_getaffinity(0))
        world = min(2, cores)
        config = _config(4)
        config["resources"] = {"launcher": "ray", "num_devices": world, "device": "cpu"}
        response = client.post("/jobs", json={"name": "local ray", "config": config})
        assert response.status_code == 201, response.text
        job_id = response.json()["id"]
        final = job_ended(client, job_id, 300, "the job on the local Ray head", interval=0.5)
        assert final["status"] == "succeeded", final
        assert (final["distributed"]["launcher"], final["distributed"]["world_size"]) == ("ray", world)
        _data_and_evaluation_run_on_the_head(client, job_id)
        cluster = client.get("/monitoring/ray").json()  # read with the head's token, like the jobs
        assert (cluster["error"], cluster["nodes_alive"], cluster["cpus"]["total"]) == (None, 1, cores), cluster
        ray_procs = [p for p in psutil.process_iter(["cmdline"]) if "tp-ray-" in " ".join(p.info["cmdline"] or [])]
        assert ray_procs, "the head's processes run with its private temp dir"
        token = token_file.read_text()
        logs = "".join(f.read_text(errors="replace") for f in data_dir.glob("*.log"))
        assert token not in logs
    gone = _wait(
        lambda: not [p for p in ray_procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE],
        60,
        "the Ray head's processes to stop with tp up",
    )
    assert gone


def _finished(client, job_id: int, what: str, timeout: float = 300) -> dict:
    return _wait(
        lambda: (j := _job(client, job_id))["status"] in ("succeeded", "failed", "cancelled") and j,
        timeout,
        what,
        interval=0.5,
    )


def _samples(client, eval_id: int) -> list[dict]:
    return client.get(f"/evaluations/{eval_id}/samples").json()["items"]


def _data_and_evaluation_run_on_the_head(client, job_id: int) -> None:
    """`executor: ray` over the API on `tp up --ray`: a dataset operation runs as Ray Data stages on the head (its
    driver a child of the data worker, reaching the head with its token) and an evaluation of the job's checkpoint
    as Ray actors, each answering as the local run does."""
    import json
    import re

    turns = (
        [{"role": "user", "content": f"What   is {i} plus {i + 1}?"}, {"role": "assistant", "content": f"{2 * i + 1}"}]
        for i in range(120)
    )
    body = "".join(json.dumps({"messages": messages}) + "\n" for messages in turns).encode()
    upload = {"file": ("sums.jsonl", body, "application/octet-stream")}
    accepted = client.post("/datasets", files=upload, data={"name": "sums"})
    assert accepted.status_code == 202, accepted.text
    ingest = _finished(client, accepted.json()["job"]["id"], "the upload's ingest")
    assert ingest["status"] == "succeeded", ingest
    dataset_id, version_id = ingest["config"]["result"]["dataset_id"], ingest["config"]["result"]["version_id"]
    recipe = {"operators": [{"op": "normalize_whitespace"}]}
    outputs = {}
    for executor in ("ray", "local"):
        op = client.post(
            f"/datasets/{dataset_id}/versions/{version_id}/operations",
            json={"operation": "clean", "params": {"recipe": recipe}, "executor": executor},
        )
        assert op.status_code == 202, op.text
        done = _finished(client, op.json()["id"], f"the clean on {executor}")
        assert done["status"] == "succeeded", done
        assert done["config"]["executor"] == executor
        reason = client.get(f"/jobs/{done['id']}/events").json()[-1]["reason"]  # the store is content-addressed
        outputs[executor] = int(re.search(r"-> (?:identical to the existing )?version (\d+)", reason).group(1))
        if executor == "ray":
            progress = done["config"]["ray_progress"]
            assert progress["done"] == progress["total"] >= 1 and sum(progress["workers"].values()) == progress["done"]
    assert outputs["ray"] == outputs["local"], outputs

    gsm8k = {"name": "gsm8k", "data": "demo/data/gsm8k_eval.jsonl", "prompt_template": "{prompt}", "limit": 6}
    ids = {}
    for executor in ("ray", "local"):
        created = client.post(
            "/evaluations",
            json={
                "job_id": job_id,
                "checkpoint": "latest",
                "benchmarks": [gsm8k],
                "generation": {"max_new_tokens": 4},
                "executor": executor,
                **({"workers": 1} if executor == "ray" else {}),
            },
        )
        assert created.status_code == 201, created.text
        ids[executor] = created.json()["id"]
    ran = {}
    for executor, eval_id in ids.items():
        assert _finished(client, eval_id, f"the evaluation on {executor}")["status"] == "succeeded"
        ran[executor] = client.get(f"/evaluations/{eval_id}").json()
    assert ran["ray"]["summary"]["executor"]["name"] == "ray" and ran["ray"]["metrics"] == ran["local"]["metrics"]
    samples = {
        executor: [(s["item_id"], s["output"], s["correct"]) for s in _samples(client, i)]
        for executor, i in ids.items()
    }
    assert len(samples["ray"]) == 6 and samples["ray"] == samples["local"]


@contextlib.contextmanager
def signed_in(browser, ray_platform):
    """A Chromium page of the platform's UI, signed in as the admin on the overview; yields (page, UI root)."""
    client, data_dir = ray_platform
    root = str(client.base_url).removesuffix("/").removesuffix("/api/v1")
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        page = context.new_page()
        page.goto(f"{root}/ui/#/")
        page.get_by_test_id("token-input").fill((data_dir / "admin.token").read_text().strip())
        page.get_by_test_id("token-save").click()
        yield page, f"{root}/ui"
    finally:
        context.close()


def test_the_overview_shows_the_ray_cluster(ray_platform, browser):
    with signed_in(browser, ray_platform) as (page, _):
        panel = page.get_by_test_id("ray-cluster")
        panel.wait_for(timeout=30_000)
        assert page.get_by_test_id("ray-nodes").locator(".stat-value").inner_text() == "2"
        assert page.get_by_test_id("ray-cpus").locator(".stat-value").inner_text().endswith(f"/ {CLUSTER_CPUS:g}")
        assert page.get_by_test_id("ray-nodes-table").locator("tbody tr").count() == 2
        assert "(head)" in page.get_by_test_id("ray-nodes-table").inner_text()
        assert page.get_by_test_id("ray-dashboard").count() == 0  # the test cluster runs no dashboard


def test_a_verl_grpo_job_over_http_runs_on_the_cluster_and_its_page_shows_each_workers_node(ray_platform, browser):
    """verl's RL as a platform job with `launcher: ray` on the session's 2-node CPU cluster: it trains through the
    worker, GET /jobs/{id} says where each of verl's actors ran, and the job page lists a torch rank on each node."""
    client, _ = ray_platform
    config = {
        "engine": "verl",
        "model": {"path": "demo/model", "dtype": "fp32"},
        "data": {"train_file": "demo/data/rl.jsonl", "max_length": 64},
        "algorithm": {"name": "grpo", "num_generations": 4, "max_completion_length": 6},
        "rewards": [{"name": "math_answer", "weight": 1.0}],
        "training": {"max_steps": 2, "per_device_batch_size": 4, "logging_steps": 1, "save_steps": 2},
        "resources": {"device": "cpu", "launcher": "ray", "num_nodes": 2, "num_devices": 1},
    }
    response = client.post("/jobs", json={"name": "verl grpo on ray", "config": config})
    assert response.status_code == 201, response.text
    job_id = response.json()["id"]
    final = job_ended(client, job_id, 600, "the verl job on the cluster", interval=1)
    assert final["status"] == "succeeded", final
    assert final["current_step"] == 2
    ranks = [w for w in final["distributed"]["workers"] if w["actor"] == "WorkerDict"]
    assert len({w["node_id"] for w in ranks}) == 2, final["distributed"]["workers"]
    with signed_in(browser, ray_platform) as (page, ui):
        page.goto(f"{ui}/#/jobs/{job_id}")
        workers = page.get_by_test_id("job-workers")
        workers.wait_for(timeout=30_000)
        rows = workers.locator("li")
        shown = {
            rows.nth(i).get_attribute("data-node")
            for i in range(rows.count())
            if "WorkerDict" in rows.nth(i).inner_text()
        }
        assert shown == {w["node_id"] for w in ranks}, "the page names the node of each torch rank"
        assert ranks[0]["node_id"][:8] in workers.inner_text()

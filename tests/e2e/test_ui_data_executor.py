"""A data job's page in Chromium against `tp up`: where the dataset operation ran (its executor, local or ray), its
number of workers and, on Ray, the blocks done overall and per worker (`config.executor`, `config.ray_progress`).

What is tested here is the page's rendering of what a data job's config holds. The jobs are real local operations
run by the platform's data worker; for the Ray case the Ray progress is then written into the job's stored config
through a database session on the platform's own database, as the data worker writes it (workers/data_tasks.py),
since a real Ray cluster is too slow for a browser test. tests/datasets/test_datasets_ray.py runs operations on a
real Ray cluster and checks the progress the worker really stores."""

from __future__ import annotations

import json

import pytest
from _e2e import get_job, wait, wait_text

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

RAY_PROGRESS = {
    "stage": "map",
    "done": 5,
    "total": 5,
    "workers": {"node-a:4242": 3, "node-b:5151": 2},
    "executor": "ray",
}


@pytest.fixture
def page(signed_in_page):
    return signed_in_page


def _finished(client, job_id: int) -> dict:
    job = wait(
        lambda: (j := get_job(client, job_id))["status"] in ("succeeded", "failed", "cancelled") and j,
        180,
        f"data job {job_id} to end",
        interval=0.5,
    )
    assert job["status"] == "succeeded", job.get("error")
    return job


def _uploaded_version(client) -> dict:
    rows = [
        {"messages": [{"role": "user", "content": f"{a}*{b}="}, {"role": "assistant", "content": str(a * b)}]}
        for a in range(5)
        for b in range(4)
    ]
    content = "".join(json.dumps(r) + "\n" for r in rows + rows[:3]).encode()
    accepted = client.post(
        "/datasets",
        files={"file": ("products.jsonl", content, "application/octet-stream")},
        data={"name": "executor-ui-products"},
    )
    assert accepted.status_code == 202, accepted.text
    result = _finished(client, accepted.json()["job"]["id"])["config"]["result"]
    return client.get(f"/datasets/{result['dataset_id']}/versions/{result['version_id']}").json()


def _local_dedup(client, version: dict) -> dict:
    """A real dedup of `version` on the local executor, run to its end by the platform's data worker."""
    queued = client.post(
        f"/datasets/{version['dataset_id']}/versions/{version['id']}/operations",
        json={"operation": "dedup", "params": {}, "executor": "local"},
    )
    assert queued.status_code == 202, queued.text
    job = _finished(client, queued.json()["id"])
    assert job["kind"] == "data" and job["config"]["executor"] == "local", job["config"]
    return job


def _store_ray_progress(data_dir, job_id: int) -> None:
    """Make the finished job's stored config one of a run on Ray: `executor: ray` and the progress the data worker
    keeps (`ray_progress`: stage, blocks done / total, blocks done per Ray worker "host:pid")."""
    from sqlmodel import Session

    from training_platform.db.models import Job
    from training_platform.db.session import make_engine

    engine = make_engine(f"sqlite:///{data_dir / 'platform.db'}")
    try:
        with Session(engine) as session:
            job = session.get(Job, job_id)
            job.config = {**job.config, "executor": "ray", "ray_progress": RAY_PROGRESS}
            session.add(job)
            session.commit()
    finally:
        engine.dispose()


def test_data_job_page_shows_its_executor_workers_and_ray_progress(page, platform, tmp_path):
    client, data_dir = platform
    version = _uploaded_version(client)
    local_job = _local_dedup(client, version)
    ray_job = _local_dedup(client, version)
    _store_ray_progress(data_dir, ray_job["id"])
    assert get_job(client, ray_job["id"])["config"]["ray_progress"] == RAY_PROGRESS

    # On Ray: the executor, two workers, the blocks done with the stage, and a row per worker with its blocks.
    page.goto(f"{page.root}/ui/#/jobs/{ray_job['id']}")
    wait_text(page, "job-status", "succeeded")
    wait_text(page, "data-executor", "ray")
    assert page.get_by_test_id("data-executor-name").inner_text().strip() == "ray"
    assert page.get_by_test_id("data-executor-workers").inner_text().strip() == "2"
    assert "2 workers" in page.get_by_test_id("data-executor").inner_text()
    page.get_by_test_id("data-ray-progress").wait_for()
    assert page.get_by_test_id("data-ray-stage").inner_text().strip() == "map"
    assert page.get_by_test_id("data-ray-blocks").inner_text().strip() == "5 / 5"
    rows = page.get_by_test_id("data-ray-worker")
    assert rows.count() == 2
    shown = {
        row.locator("td").nth(0).inner_text().strip(): int(row.locator("td").nth(1).inner_text()) for row in rows.all()
    }
    assert shown == RAY_PROGRESS["workers"], shown
    assert [row.get_attribute("data-worker") for row in rows.all()] == ["node-a:4242", "node-b:5151"]
    page.screenshot(path=str(tmp_path / "data-job-ray.png"), full_page=True)

    # Locally: `local`, one worker, and no Ray part.
    page.goto(f"{page.root}/ui/#/jobs/{local_job['id']}")
    wait_text(page, "data-executor", "local")
    assert page.get_by_test_id("data-executor-name").inner_text().strip() == "local"
    assert page.get_by_test_id("data-executor-workers").inner_text().strip() == "1"
    assert "1 worker" in page.get_by_test_id("data-executor").inner_text()
    assert page.get_by_test_id("data-ray-progress").count() == 0
    assert page.get_by_test_id("data-ray-worker").count() == 0

"""Sharing the devices in Chromium against `tp up`: a tiny SFT job's device time on the usage page (a stacked bar per
user and day, a row for its owner with device-hours > 0) and on the job page; the admin's quota set through the
editor and shown in the quota card (an empty field is no limit); a job held back by that quota shows its place in
the queue and why it waits, in the jobs list and on its page."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from _e2e import get_job, wait, wait_text

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
LIMITS = ("max_devices", "max_running_jobs", "device_hours_per_week")


@pytest.fixture
def page(signed_in_page):
    return signed_in_page


def _tiny_config(max_steps: int) -> dict:
    config = yaml.safe_load((REPO / "configs/examples/sft_tiny.yaml").read_text())
    config["training"].update(max_steps=max_steps, logging_steps=2, save_steps=max_steps)
    config["training"].pop("eval_steps", None)
    config["data"].pop("eval_file", None)
    return config


def _finished_with_usage(client, job_id: int) -> dict:
    """The job, succeeded, once its usage is final (the worker closes the attempt's record as the job ends)."""

    def done():
        job = get_job(client, job_id)
        assert job["status"] not in ("failed", "cancelled"), job.get("error")
        return job["status"] == "succeeded" and job.get("usage") and not job["usage"]["running"] and job

    return wait(done, 240, "the tiny SFT job to succeed with its usage recorded", interval=0.5)


def test_usage_page_job_usage_quota_editor_and_queue_reason(page, platform):
    client, _ = platform
    me = client.get("/users/me").json()
    before = client.get(f"/users/{me['id']}/quota")
    assert before.status_code == 200, before.text
    previous = {k: before.json()[k] for k in LIMITS}

    response = client.post("/jobs", json={"name": "usage-ui sft", "config": _tiny_config(4)})
    assert response.status_code == 201, response.text
    job_id = response.json()["id"]
    job = _finished_with_usage(client, job_id)
    assert job["usage"]["device_hours"] > 0 and job["usage"]["attempts"] == 1, job["usage"]

    try:
        # The usage page (from the nav): the chart draws the window's days, one series per user; the table has the
        # admin's row with its device-hours, and a totals row.
        page.get_by_test_id("nav-usage").click()
        page.wait_for_url("**/#/usage")
        page.locator("[data-testid=usage-chart] canvas").first.wait_for()
        page.wait_for_function("Number(document.querySelector('[data-testid=usage-chart]')?.dataset.series) >= 1")
        row = page.locator(f"[data-testid=usage-table] tbody tr[data-user-id='{me['id']}']")
        row.wait_for()
        assert me["name"] in row.inner_text()
        hours = row.get_by_test_id("usage-hours").inner_text()
        assert float(hours) > 0, hours
        page.get_by_test_id("usage-total").wait_for()
        assert float(page.get_by_test_id("usage-total-hours").inner_text()) >= float(hours)

        # By job: the job has its own row.
        page.get_by_test_id("usage-group-by").select_option("job")
        page.locator(f"[data-testid=usage-table] tbody tr[data-job-id='{job_id}']").wait_for()

        # The job page: what the job used.
        page.goto(f"{page.root}/ui/#/jobs/{job_id}")
        page.get_by_test_id("job-usage").wait_for()
        assert "Device-hours" in page.get_by_test_id("job-usage").inner_text()
        assert (
            f"{job['usage']['devices']} × {job['usage']['device']}"
            in page.get_by_test_id("job-usage-devices").inner_text()
        )
        assert float(page.get_by_test_id("job-usage-hours").inner_text()) > 0
        assert page.get_by_test_id("job-usage-attempts").inner_text().strip() == "1"

        # The quota editor (admins): the admin's own limits, then the quota card shows them.
        page.goto(f"{page.root}/ui/#/usage")
        page.get_by_test_id("quota-editor").wait_for()
        page.get_by_test_id("quota-card").wait_for()
        page.get_by_test_id("quota-user").select_option(str(me["id"]))
        page.get_by_test_id("quota-max-devices-input").fill("64")
        page.get_by_test_id("quota-max-running-jobs-input").fill("50")
        page.get_by_test_id("quota-device-hours-input").fill("1000")
        page.get_by_test_id("quota-save").click()
        wait_text(page, "quota-saved", "Saved")
        wait_text(page, "quota-devices", "of 64")
        wait_text(page, "quota-running-jobs", "of 50")
        wait_text(page, "quota-hours", "of 1000")
        wait_text(page, "quota-source", "set by an admin")
        quota = client.get(f"/users/{me['id']}/quota").json()
        assert (quota["max_devices"], quota["max_running_jobs"], quota["device_hours_per_week"]) == (64, 50, 1000)
        assert quota["source"] == "user"

        # An empty field is no limit.
        page.get_by_test_id("quota-max-devices-input").fill("")
        page.get_by_test_id("quota-save").click()
        wait_text(page, "quota-devices", "of no limit")
        assert client.get(f"/users/{me['id']}/quota").json()["max_devices"] is None

        # A job the quota holds back: its place in the queue and the reason, in the jobs list and on its page.
        put = client.put(
            f"/users/{me['id']}/quota",
            json={"max_devices": None, "max_running_jobs": 0, "device_hours_per_week": None},
        )
        assert put.status_code == 200, put.text
        held = client.post("/jobs", json={"name": "usage-ui held back", "config": _tiny_config(4)})
        assert held.status_code == 201, held.text
        held_id = held.json()["id"]
        try:
            queued = wait(lambda: (j := get_job(client, held_id)).get("queue") and j, 30, "the held job's queue info")
            assert queued["status"] == "queued" and "quota" in queued["queue"]["reason"], queued["queue"]
            page.goto(f"{page.root}/ui/#/jobs?q=usage-ui")
            reason = page.get_by_test_id(f"job-row-{held_id}").get_by_test_id("queue-reason")
            reason.wait_for()
            assert reason.inner_text().startswith("#") and "quota" in reason.inner_text(), reason.inner_text()
            page.goto(f"{page.root}/ui/#/jobs/{held_id}")
            page.get_by_test_id("job-queue").wait_for()
            text = page.get_by_test_id("job-queue").inner_text()
            assert "Waiting (position" in text and "in the queue)" in text and "quota" in text, text
        finally:
            client.post(f"/jobs/{held_id}/cancel")
    finally:
        client.put(f"/users/{me['id']}/quota", json=previous)

"""The launch page in Chromium against `tp up`: a form generated from the config schema (errors from
/jobs/validate shown at their fields while typing), in sync with the YAML tab both ways, the effective config
before submitting, launch, clone, and a template saved and started from."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from _e2e import wait_text

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture
def page(signed_in_page):
    return signed_in_page


def test_launch_from_the_schema_form_with_live_checks_yaml_sync_clone_and_templates(page, platform, tmp_path):
    client, _ = platform
    page.get_by_test_id("launch-form-link").click()
    page.get_by_test_id("launch-form").wait_for()
    wait_text(page, "launch-source", "sft_tiny")
    wait_text(page, "validation-state", "valid")

    # A bad value typed into a generated field: the server's error appears at that field, as the user types.
    lr = page.get_by_test_id("field-training.learning_rate")
    lr.fill("-1")
    page.get_by_test_id("field-training.learning_rate-error").wait_for()
    assert "must be > 0" in page.get_by_test_id("field-training.learning_rate-error").inner_text()
    lr.fill("0.002")
    page.get_by_test_id("field-training.max_steps").fill("20")
    wait_text(page, "validation-state", "valid")
    wait_text(page, "effective-config", "max_steps: 20")
    assert "trust_remote_code: false" in page.get_by_test_id("effective-config").inner_text(), "defaults filled in"

    # The YAML tab shows what the form holds; an edit there is what the form shows back.
    page.get_by_test_id("tab-yaml").click()
    text = page.get_by_test_id("job-config").input_value()
    assert "max_steps: 20" in text and "learning_rate: 0.002" in text
    page.get_by_test_id("job-config").fill(text.replace("max_steps: 20", "max_steps: 12"))
    page.get_by_test_id("tab-form").click()
    assert page.get_by_test_id("field-training.max_steps").input_value() == "12"
    wait_text(page, "effective-config", "max_steps: 12")

    # Save as a template, then launch.
    page.get_by_test_id("template-name").fill("tiny-sft-from-the-form")
    page.get_by_test_id("template-save").click()
    wait_text(page, "launch-notice", "tiny-sft-from-the-form")
    page.get_by_test_id("job-name").fill("launched from the form")
    page.get_by_test_id("job-submit").click()
    page.wait_for_url("**/#/jobs/*")
    job_id = int(page.url.rsplit("/", 1)[-1])
    job = client.get(f"/jobs/{job_id}").json()
    assert job["name"] == "launched from the form"
    assert job["config"]["training"]["max_steps"] == 12 and job["config"]["training"]["learning_rate"] == 0.002

    # Clone: the launch page starts from that job's config.
    page.get_by_test_id("job-clone").click()
    wait_text(page, "launch-source", f"job #{job_id}")
    assert page.get_by_test_id("job-name").input_value() == "launched from the form (clone)"
    assert page.get_by_test_id("field-training.max_steps").input_value() == "12"

    # The template is offered and starts a form too.
    template = next(t for t in client.get("/templates").json()["items"] if t["name"] == "tiny-sft-from-the-form")
    page.get_by_test_id("launch-template").select_option(str(template["id"]))
    wait_text(page, "launch-source", "template tiny-sft-from-the-form")
    page.screenshot(path=str(tmp_path / "launch.png"), full_page=True)

    # Sweep mode: a 2x2 grid with one seed makes 4 grouped jobs.
    page.get_by_test_id("job-name").fill("form-sweep")
    page.get_by_test_id("sweep-mode").check()
    page.get_by_test_id("sweep-key-0").fill("training.learning_rate")
    page.get_by_test_id("sweep-values-0").fill("0.001, 0.002")
    page.get_by_test_id("sweep-add-key").click()
    page.get_by_test_id("sweep-key-1").fill("training.per_device_batch_size")
    page.get_by_test_id("sweep-values-1").fill("4, 8")
    page.get_by_test_id("sweep-seeds").fill("0")
    page.get_by_test_id("job-submit").click()
    page.wait_for_url("**/#/jobs?q=form-sweep")
    sweep = next(s for s in client.get("/sweeps").json()["items"] if s["name"] == "form-sweep")
    detail = client.get(f"/sweeps/{sweep['id']}").json()
    assert len(detail["jobs"]) == 4 and len(detail["points"]) == 4
    for job in detail["jobs"]:
        page.get_by_test_id(f"job-row-{job['id']}").wait_for()
    client.post(f"/sweeps/{sweep['id']}/cancel")  # the worker has better things to do in the other tests


def test_a_job_its_preflight_refused_is_edited_not_retried_and_the_form_says_why(page, platform):
    """POST /jobs checks the config; the worker's preflight reads the disk and refuses a model that is not there.
    The job then offers the form, filled, where /jobs/validate (the same checks) shows the problem at its field."""
    client, _ = platform
    import yaml
    from _e2e import wait

    config = yaml.safe_load((REPO / "configs/examples/sft_tiny.yaml").read_text())
    config["model"]["path"] = "demo/no_such_model"
    job = client.post("/jobs", json={"name": "no such model", "config": config, "priority": 100}).json()
    refused = wait(
        lambda: (j := client.get(f"/jobs/{job['id']}").json())["status"] in ("failed", "succeeded") and j,
        180,
        "the preflight to refuse the job",
    )
    assert refused["status"] == "failed" and refused["preflight"]["ok"] is False, refused
    page.goto(f"{page.root}/ui/#/jobs/{job['id']}")
    page.get_by_test_id("job-edit-relaunch").wait_for()
    assert page.get_by_test_id("job-retry").count() == 0, "a retry would fail the same way"
    page.get_by_test_id("job-edit-relaunch").click()
    wait_text(page, "launch-source", f"job #{job['id']}")
    error = page.get_by_test_id("field-model.path-error")
    error.wait_for()
    assert "no such model directory" in error.inner_text()
    page.get_by_test_id("field-model.path").fill("demo/model")
    wait_text(page, "validation-state", "valid")


def test_jobs_list_search_filters_tags_columns_saved_views_and_bulk_actions(page, platform):
    client, _ = platform
    import yaml
    from _e2e import wait

    config = yaml.safe_load((REPO / "configs/examples/sft_tiny.yaml").read_text())
    config["training"]["max_steps"] = 100000
    ids = [
        client.post("/jobs", json={"name": f"bulkjob-{i}", "config": config, "priority": -500 + i}).json()["id"]
        for i in range(3)
    ]
    try:
        page.goto(f"{page.root}/ui/#/jobs?q=bulkjob&sort=priority")
        page.get_by_test_id(f"job-row-{ids[0]}").wait_for()
        rows = page.get_by_test_id("jobs-table").locator("tbody tr")
        assert [rows.nth(i).get_attribute("data-testid") for i in range(3)] == [f"job-row-{i}" for i in ids]
        page.reload()  # the filters are in the URL
        page.get_by_test_id(f"job-row-{ids[2]}").wait_for()
        assert page.get_by_test_id("jobs-search").input_value() == "bulkjob"
        assert page.get_by_test_id("sort-select").input_value() == "priority"

        page.get_by_test_id("status-filter").select_option("succeeded")
        page.wait_for_url("**status=succeeded**")
        page.get_by_test_id("jobs-table").get_by_text("No jobs match these filters.").wait_for()
        page.get_by_test_id("status-filter").select_option("")
        page.get_by_test_id(f"job-row-{ids[0]}").wait_for()

        # The runs table: a tag and a note from the job page, the tag as a filter, metric columns, a saved view.
        page.goto(f"{page.root}/ui/#/jobs/{ids[1]}")
        page.get_by_test_id("tag-input").fill("baseline")
        page.get_by_test_id("tag-input").press("Enter")
        page.get_by_test_id("tag-baseline").wait_for()
        page.get_by_test_id("note-edit").click()
        page.get_by_test_id("note-input").fill("lr from the sweep's best point")
        page.get_by_test_id("note-save").click()
        wait_text(page, "job-note", "lr from the sweep's best point")
        stored = client.get(f"/jobs/{ids[1]}").json()
        assert stored["tags"] == ["baseline"] and stored["note"] == "lr from the sweep's best point"
        page.goto(f"{page.root}/ui/#/jobs?q=bulkjob")
        page.get_by_test_id(f"job-tag-{ids[1]}-baseline").locator("a").click()
        page.wait_for_url("**tag=baseline**")
        page.wait_for_function("document.querySelectorAll('[data-testid=jobs-table] tbody tr').length === 1")
        page.get_by_test_id(f"job-row-{ids[1]}").wait_for()
        page.get_by_test_id("column-loss").check()
        page.get_by_test_id("column-eval").check()
        page.wait_for_url(lambda url: "cols=loss,eval" in url.replace("%2C", ","))
        assert page.get_by_test_id("column-head-loss").text_content() == "Last loss"
        assert page.get_by_test_id(f"cell-loss-{ids[1]}").inner_text().strip() == "—", "no metrics logged yet"
        page.once("dialog", lambda dialog: dialog.accept("baseline runs"))
        page.get_by_test_id("save-view").click()
        page.wait_for_function(
            "[...document.querySelectorAll('[data-testid=saved-views] option')].some(o => o.text === 'baseline runs')"
        )
        view = next(v for v in client.get("/views", params={"page": "jobs"}).json() if v["name"] == "baseline runs")
        assert view["query"] == {"q": "bulkjob", "tag": "baseline", "cols": "loss,eval"}, view
        page.goto(f"{page.root}/ui/#/jobs?q=bulkjob")
        page.get_by_test_id(f"job-row-{ids[0]}").wait_for()
        page.get_by_test_id("saved-views").select_option(str(view["id"]))
        page.wait_for_url("**tag=baseline**")
        page.get_by_test_id("column-head-eval").wait_for()
        page.get_by_test_id("delete-view").click()
        wait(lambda: not client.get("/views", params={"page": "jobs"}).json(), 30, "the view to be deleted")
        page.goto(f"{page.root}/ui/#/jobs?q=bulkjob")
        page.get_by_test_id(f"job-row-{ids[0]}").wait_for()

        page.get_by_test_id("select-all").check()
        page.get_by_test_id("bulk-cancel").click()
        page.get_by_test_id("bulk-notice").wait_for()
        wait(
            lambda: all(client.get(f"/jobs/{i}").json()["status"] == "cancelled" for i in ids),
            120,
            "the selected jobs to be cancelled",
        )
        page.once("dialog", lambda dialog: dialog.accept())
        page.get_by_test_id("select-all").check()
        page.get_by_test_id("bulk-delete").click()
        wait(lambda: all(client.get(f"/jobs/{i}").status_code == 404 for i in ids), 60, "the jobs to be deleted")
        page.get_by_test_id("jobs-table").get_by_text("No jobs match these filters.").wait_for()
    finally:  # never leave 100000-step jobs holding the worker for the next tests
        for job_id in ids:
            client.post(f"/jobs/{job_id}/cancel")


def test_a_running_grpo_job_is_followed_live_then_its_rollouts_browsed_by_step_and_reward(page, platform):
    """The page never shows less than the API: its step catches up with the API's latest metric step within one
    poll, and after the run ends the rollouts panel moves to the last kept step without a reload."""
    client, _ = platform
    import yaml
    from _e2e import wait

    config = yaml.safe_load((REPO / "configs/examples/grpo_tiny.yaml").read_text())
    config["training"].update(max_steps=300, logging_steps=10, save_steps=300, rollout_samples_per_step=6)
    job = client.post("/jobs", json={"name": "grpo-rollouts", "config": config, "priority": 100}).json()
    page.goto(f"{page.root}/ui/#/jobs/{job['id']}")
    page.get_by_test_id("rollouts-panel").wait_for()

    def latest_metric_step() -> int:
        series = client.get(f"/jobs/{job['id']}/metrics", params={"names": "loss"}).json()["series"]
        return max((point[0] for point in series.get("loss", [])), default=0)

    label = "document.querySelector('[data-testid=job-progress] .progress-label').innerText"
    page_step = f"Number({label}.split(' / ')[0])"
    seen_running = 0
    deadline = time.monotonic() + 300
    while client.get(f"/jobs/{job['id']}").json()["status"] in ("queued", "preflight", "running"):
        assert time.monotonic() < deadline, "the GRPO job did not end within 300 s"
        step = latest_metric_step()
        current = client.get(f"/jobs/{job['id']}").json()
        assert current["current_step"] >= step, "current_step is never behind the last metric row"
        if current["status"] == "running" and 0 < step < 300:
            page.wait_for_function(f"{page_step} >= {step}", timeout=6_000)  # a 2 s poll, with slack for load
            seen_running += 1
        page.wait_for_timeout(500)
    job = client.get(f"/jobs/{job['id']}").json()
    assert job["status"] == "succeeded", job.get("error")
    assert seen_running >= 2, "the page was checked while the job ran"
    # After the end, without a reload: the last step, and the rollouts of the last kept step.
    page.wait_for_function(f"{page_step} === 300", timeout=6_000)
    wait(lambda: page.get_by_test_id("rollout-step").input_value() == "300", 10, "the last kept step")
    kept = [o.get_attribute("value") for o in page.get_by_test_id("rollout-step").locator("option").all()]
    assert kept[-1] == "300" and {str(step) for step in range(10, 301, 10)} <= set(kept), kept
    page.get_by_test_id("rollout-row-0").wait_for()
    wait_text(page, "rollout-total", "6 rollouts")
    page.get_by_test_id("rollout-row-0").click()
    detail = page.get_by_test_id("rollout-detail-0")
    detail.wait_for()
    api_row = client.get(f"/jobs/{job['id']}/rollouts", params={"step": 300, "limit": 1}).json()["items"][0]
    assert api_row["completion"] in detail.inner_text() and "math_answer" in detail.inner_text()
    page.get_by_test_id("reward-histogram").locator("canvas").first.wait_for()
    page.get_by_test_id("rollout-step").select_option("10")
    page.get_by_test_id("rollout-min").fill("1000")
    wait_text(page, "rollout-total", "0 rollouts")

    # Charts: one panel per metric family with its own axis; smoothing, log scale and time on x re-draw them.
    page.get_by_test_id("metric-panel-loss").locator("canvas").first.wait_for()
    page.get_by_test_id("metric-panel-reward").locator("canvas").first.wait_for()
    assert "rewards/math_answer/mean" in page.get_by_test_id("metric-panel-reward").inner_text()
    assert page.get_by_test_id("metric-panel-length").is_visible(), "completion lengths have their own panel"
    page.get_by_test_id("metrics-smoothing").fill("0.8")
    page.get_by_test_id("metrics-log").check()
    page.get_by_test_id("metrics-x").select_option("time")
    page.get_by_test_id("metric-panel-reward").locator("canvas").first.wait_for()


def test_chat_with_a_checkpoint_ab_against_its_base_and_download_it(page, platform, tmp_path):
    client, _ = platform
    import tarfile

    import yaml
    from _e2e import wait

    config = yaml.safe_load((REPO / "configs/examples/sft_tiny.yaml").read_text())
    config["training"].update(max_steps=40, save_steps=40, logging_steps=10)
    config["training"].pop("eval_steps", None)
    config["data"].pop("eval_file", None)
    job = client.post("/jobs", json={"name": "chat-me", "config": config, "priority": 100}).json()
    wait(lambda: client.get(f"/jobs/{job['id']}").json()["status"] in ("succeeded", "failed"), 240, "the SFT job")
    page.goto(f"{page.root}/ui/#/jobs/{job['id']}")
    page.get_by_test_id("job-chat").click()
    page.get_by_test_id("pg-side-1").wait_for()  # A/B: the base model on the right
    assert page.get_by_test_id("pg-model-0").input_value() == f"job-{job['id']}/final"
    base = page.get_by_test_id("pg-model-1").input_value()
    assert base, "the job's base model is chosen for B"
    page.get_by_test_id("pg-temperature").fill("0")
    page.get_by_test_id("pg-max-tokens").fill("8")
    page.get_by_test_id("pg-input").fill("6+8=")
    page.get_by_test_id("pg-send").click()
    page.get_by_test_id("pg-usage-0").wait_for(timeout=120_000)
    page.get_by_test_id("pg-usage-1").wait_for(timeout=120_000)
    reply_a = page.get_by_test_id("pg-msg-0-1").locator(".pg-text").inner_text().strip()
    reply_b = page.get_by_test_id("pg-msg-1-1").locator(".pg-text").inner_text().strip()
    # The streamed reply is the model's: the same request without streaming gives the same text.
    same = client.post(
        "/playground/generate",
        json={
            "model": {"job_id": job["id"], "checkpoint": "final"},
            "messages": [{"role": "user", "content": "6+8="}],
            "max_new_tokens": 8,
            "temperature": 0,
            "top_p": 1.0,
            "seed": 0,
        },
        timeout=120,
    ).json()
    assert reply_a == same["text"].strip() and reply_a
    models = {m["name"]: m["id"] for m in client.get("/models").json()["items"]}
    same_b = client.post(
        "/playground/generate",
        json={
            "model": {"model_id": models[base]},
            "messages": [{"role": "user", "content": "6+8="}],
            "max_new_tokens": 8,
            "temperature": 0,
            "top_p": 1.0,
            "seed": 0,
        },
        timeout=120,
    ).json()
    assert reply_b == same_b["text"].strip(), "B is the base model's own answer"
    assert "tokens" in page.get_by_test_id("pg-usage-1").inner_text()

    # Download the final model as an archive and open it.
    page.goto(f"{page.root}/ui/#/jobs/{job['id']}")
    with page.expect_download() as download:
        page.get_by_test_id("download-final").click()
    archive = tmp_path / "final.tar"
    download.value.save_as(archive)
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert any(n.endswith("config.json") for n in names) and any(n.endswith("MANIFEST.sha256") for n in names)

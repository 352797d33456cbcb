"""The web UI in a real browser (Chromium driven by Playwright) against the running platform (`tp up`): sign in with
a token, submit a training job from the form (a bad config shows its field errors first), watch it run with a live
loss chart and finish, then evaluate it from the UI and find it on the leaderboard and in the per-sample view."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from _e2e import wait, wait_text

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def page(browser, platform):
    client, data_dir = platform
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    # The browser logs every 4xx response as an error; the 401 (sign-in) and 422 (bad config) are on purpose.
    expected = ("status of 401", "status of 422")
    page.on(
        "console",
        lambda msg: (
            errors.append(msg.text) if msg.type == "error" and not any(e in msg.text for e in expected) else None
        ),
    )
    page.root = str(client.base_url).removesuffix("/api/v1/").removesuffix("/api/v1")  # type: ignore[attr-defined]
    page.token = (data_dir / "admin.token").read_text().strip()  # type: ignore[attr-defined]
    yield page
    context.close()
    assert not errors, f"browser errors: {errors}"


def _sign_in(page) -> None:
    page.goto(f"{page.root}/ui/#/jobs")
    page.get_by_test_id("token-input").fill(page.token)
    page.get_by_test_id("token-save").click()
    page.get_by_test_id("jobs-table").wait_for()


def _config(max_steps: int) -> str:
    config = yaml.safe_load((REPO / "configs/examples/sft_tiny.yaml").read_text())
    config["training"].update(max_steps=max_steps, logging_steps=5, save_steps=50)
    config["training"].pop("eval_steps", None)
    config["data"].pop("eval_file", None)
    return yaml.safe_dump(config, sort_keys=False)


def test_submit_watch_and_evaluate_a_job_in_the_browser(page, platform, tmp_path):
    client, _ = platform
    _sign_in(page)

    # A bad config: the form shows every problem with its field path and stays.
    page.get_by_test_id("new-job").click()
    page.get_by_test_id("job-name").fill("from the browser")
    page.get_by_test_id("job-config").fill(_config(150).replace("learning_rate: 0.002", "learning_rate: -1"))
    page.get_by_test_id("job-submit").click()
    errors = page.get_by_test_id("error-list")
    errors.wait_for()
    assert "training.learning_rate" in errors.inner_text()

    page.get_by_test_id("job-config").fill(_config(150))
    page.get_by_test_id("job-submit").click()
    page.wait_for_url("**/#/jobs/*")
    job_id = int(page.url.rsplit("/", 1)[-1])
    status = page.get_by_test_id("job-status")
    # Live: the chart has points while the job runs, then the badge reads succeeded.
    page.get_by_test_id("metrics-chart").locator("canvas").first.wait_for()
    page.wait_for_function(
        "document.querySelector('[data-testid=job-status]').innerText.includes('succeeded')", timeout=240_000
    )
    assert "succeeded" in status.inner_text()
    assert client.get(f"/jobs/{job_id}").json()["status"] == "succeeded"
    checkpoints = page.get_by_test_id("checkpoints-table")
    checkpoints.wait_for()
    assert "150" in checkpoints.inner_text()
    logs = page.get_by_test_id("job-logs")
    page.wait_for_function("document.querySelector('[data-testid=job-logs]').innerText.includes('run succeeded')")
    assert "run succeeded" in logs.inner_text()
    # The whole log, searched and filtered in the page, and downloaded.
    page.get_by_test_id("log-search").fill("checkpoint saved")
    page.wait_for_function("document.querySelector('[data-testid=log-matches]').innerText.startsWith('3 shown')")
    assert all("checkpoint saved" in line for line in logs.inner_text().splitlines())
    page.get_by_test_id("log-search").fill("")
    page.get_by_test_id("log-level").select_option("error")
    page.wait_for_function("document.querySelector('[data-testid=log-matches]').innerText.startsWith('0 shown')")
    with page.expect_download() as download:
        page.get_by_test_id("download-log").click()
    assert "run succeeded" in Path(download.value.path()).read_text()
    assert download.value.suggested_filename == f"job-{job_id}-train.log"
    assert "local · 1 node × 1 = world size 1" in " ".join(page.get_by_test_id("job-processes").inner_text().split())
    page.screenshot(path=str(tmp_path / "job-page.png"))

    # Evaluate the final model from the UI.
    page.goto(f"{page.root}/ui/#/evaluations")
    page.get_by_test_id("evaluations-table").wait_for()
    page.get_by_test_id("new-evaluation").click()
    registry = [b["name"] for b in client.get("/evaluations/benchmarks").json()]
    page.wait_for_function(  # the form offers the server's benchmarks, one checkbox each
        f"document.querySelectorAll('[data-testid=eval-benchmarks] input[type=checkbox]').length === {len(registry)}"
    )
    boxes = page.get_by_test_id("eval-benchmarks").locator("input[type=checkbox]")
    assert [b.get_attribute("data-benchmark") for b in boxes.all()] == registry
    assert page.get_by_test_id("eval-benchmarks-pick-gsm8k").is_checked()  # the default (evalDefaults.ts)
    page.get_by_test_id("eval-model").fill(f"runs/job-{job_id}/final")  # a path: free text in the model picker
    page.get_by_test_id("evaluation-submit").click()

    def evaluation_of_job():
        items = client.get("/evaluations", params={"limit": 200}).json()["items"]
        return next((e for e in items if e["model"].endswith(f"job-{job_id}/final")), None)

    evaluation = wait(evaluation_of_job, 30, "the evaluation submitted from the UI")
    wait(
        lambda: client.get(f"/evaluations/{evaluation['id']}").json()["status"] == "succeeded",
        180,
        "the evaluation to succeed",
    )
    page.goto(f"{page.root}/ui/#/evaluations/{evaluation['id']}")
    page.wait_for_function("document.querySelector('[data-testid=eval-metrics]')?.innerText.includes('accuracy')")
    page.get_by_test_id("samples-table").wait_for()
    assert page.get_by_test_id("samples-table").locator("tbody tr").count() > 0

    page.goto(f"{page.root}/ui/#/evaluations")
    picker = page.get_by_test_id("leaderboard-benchmark")
    page.wait_for_function("document.querySelectorAll('[data-testid=leaderboard-benchmark] option').length > 0")
    assert [o.get_attribute("value") for o in picker.locator("option").all()] == registry, "the server's registry"
    picker.select_option("gsm8k")
    board = page.get_by_test_id("leaderboard-table")
    board.wait_for()
    page.wait_for_function(
        f"document.querySelector('[data-testid=leaderboard-table]').innerText.includes('job-{job_id}')"
    )
    page.screenshot(path=str(tmp_path / "evaluations-page.png"))
    assert evaluation["benchmarks"] == ["gsm8k"]


def test_upload_a_dataset_and_run_an_operation_in_the_browser(page, platform, tmp_path):
    client, data_dir = platform
    _sign_in(page)
    rows = [
        {"messages": [{"role": "user", "content": f"{a}+{b}="}, {"role": "assistant", "content": str(a + b)}]}
        for a in range(6)
        for b in range(5)
    ]
    file = tmp_path / "sums.jsonl"
    file.write_text("".join(json.dumps(r) + "\n" for r in rows + rows[:7]))  # 7 exact duplicates

    page.goto(f"{page.root}/ui/#/datasets")
    page.get_by_test_id("new-dataset").click()
    page.get_by_test_id("dataset-file").set_input_files(str(file))
    page.get_by_test_id("dataset-name").fill("browser-sums")
    page.get_by_test_id("dataset-submit").click()
    page.wait_for_url("**/#/datasets/*")
    page.get_by_test_id("versions-table").wait_for()
    page.wait_for_function("document.querySelector('[data-testid=rows-table]')?.innerText.includes('0+0=')")
    dataset = next(d for d in client.get("/datasets").json()["items"] if d["name"] == "browser-sums")
    versions = client.get(f"/datasets/{dataset['id']}/versions").json()["items"]
    assert [v["rows"] for v in versions] == [37]

    # The quality gate of this version, red and green per check: 7 of 37 rows are duplicates.
    page.get_by_test_id("gate-profile").select_option("default")
    page.get_by_test_id("gate-run").click()
    page.get_by_test_id("gate-checks").wait_for(timeout=120_000)
    checks = {
        row.locator("td").nth(0).inner_text(): row.locator("td").nth(1).inner_text().strip()
        for row in page.get_by_test_id("gate-checks").locator("tbody tr").all()
    }
    assert checks["duplicates"] == "fail" and checks["schema"] == "pass", checks
    assert "fail" in page.get_by_test_id("gate-verdict").inner_text().lower()

    # Invalid parameters: the field errors, nothing queued; then a real dedup job from the form.
    page.get_by_test_id("operation-name").select_option("dedup")
    page.get_by_test_id("operation-params").fill('{"bogus": 1}')
    page.get_by_test_id("operation-submit").click()
    page.get_by_test_id("error-list").wait_for()
    assert "params.bogus" in page.get_by_test_id("error-list").inner_text()
    page.get_by_test_id("operation-params").fill("{}")
    page.get_by_test_id("operation-submit").click()
    page.get_by_test_id("operation-job-link").wait_for()
    page.get_by_test_id("operation-result").wait_for(timeout=120_000)
    versions = client.get(f"/datasets/{dataset['id']}/versions").json()["items"]
    assert [v["rows"] for v in versions] == [37, 30], "the dedup version has the 30 distinct rows"
    assert versions[1]["parent_version_id"] == versions[0]["id"] and versions[1]["operation"] == "dedup"
    page.get_by_test_id("operation-job-link").click()
    page.wait_for_url("**/#/jobs/*")
    page.wait_for_function("document.querySelector('[data-testid=job-status]')?.innerText.includes('succeeded')")

    # One click from the deduplicated version to training on it: the launch form has data.train_file set.
    dedup = versions[1]
    page.goto(f"{page.root}/ui/#/datasets/{dataset['id']}?v={dedup['id']}")
    page.get_by_test_id("version-train").click()
    page.get_by_test_id("launch-form").wait_for()
    wait_text(page, "handoff-train-file", dedup["path"])
    wait_text(page, "launch-source", "sft_tiny")
    assert page.get_by_test_id("field-data.train_file").input_value() == dedup["path"]
    page.get_by_test_id("field-training.max_steps").fill("2")
    wait_text(page, "validation-state", "valid")
    page.get_by_test_id("job-submit").click()
    page.wait_for_url("**/#/jobs/*")
    job_id = int(page.url.rsplit("/", 1)[-1])
    job = wait(
        lambda: (j := client.get(f"/jobs/{job_id}").json())["status"] in ("succeeded", "failed") and j,
        180,
        "the job on the deduplicated version",
    )
    assert job["status"] == "succeeded", job.get("error")
    assert job["config"]["data"]["train_file"] == dedup["path"] and "eval_file" not in job["config"]["data"]

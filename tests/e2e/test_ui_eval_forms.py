"""The evaluation and schedule forms in Chromium against `tp up`, generated from GET /evaluations/schema and
/schedules/schema: opened from a checkpoint link (`#/evaluations?new=1&job_id=N&checkpoint=S`, as other pages link
here) with the job's checkpoint chosen; the benchmark picker offers the server's registry; a submission with no
benchmark and one with limit 0 are refused with a readable error at the field, which goes when the field changes;
the evaluation then created carries exactly what the form set (the picked benchmark with its options, one generation
field). A model link prefills the model; the schedule form's job picker is used with the keyboard, and a bad cron
expression is shown at its field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from _e2e import wait

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.e2e, pytest.mark.slow]

JOB_NAME = "eval-forms sft"


def _form_defaults() -> dict:
    """EVAL_FORM_DEFAULTS of frontend/src/evalDefaults.ts (a JSON-like literal, read as YAML's flow style), so the
    test follows the defaults wherever they are changed."""
    text = (REPO / "frontend/src/evalDefaults.ts").read_text()
    literal = re.search(r"EVAL_FORM_DEFAULTS\b[^=]*=\s*(\{.*?\n\})", text, re.S).group(1)
    return yaml.safe_load(re.sub(r",(\s*[}\]])", r"\1", literal))


@pytest.fixture
def page(browser, platform):
    """A Chromium page signed in as the admin; any browser error fails the test, but for the 422s the forms are
    sent on purpose (the browser logs every 4xx response) and the 401 before the token is set."""
    client, data_dir = platform
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    expected = ("status of 401", "status of 422")
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on(
        "console",
        lambda msg: (
            errors.append(msg.text) if msg.type == "error" and not any(e in msg.text for e in expected) else None
        ),
    )
    root = str(client.base_url).removesuffix("/api/v1/").removesuffix("/api/v1")
    page.goto(f"{root}/ui/#/jobs")
    page.get_by_test_id("token-input").fill((data_dir / "admin.token").read_text().strip())
    page.get_by_test_id("token-save").click()
    page.get_by_test_id("jobs-table").wait_for()
    page.root = root  # type: ignore[attr-defined]
    yield page
    context.close()
    assert not errors, f"browser errors: {errors}"


def _trained_job(client) -> dict:
    """A 20-step SFT job on the demo config with checkpoints at steps 10 and 20, succeeded."""
    config = yaml.safe_load((REPO / "configs/examples/sft_tiny.yaml").read_text())
    config["training"].update(max_steps=20, save_steps=10, logging_steps=5)
    config["training"].pop("eval_steps", None)
    config["data"].pop("eval_file", None)
    response = client.post("/jobs", json={"name": JOB_NAME, "config": config})
    assert response.status_code == 201, response.text
    job_id = response.json()["id"]

    def finished():
        job = client.get(f"/jobs/{job_id}").json()
        assert job["status"] not in ("failed", "cancelled"), job["error"]
        return job["status"] == "succeeded" and job

    return wait(finished, 240, "the 20-step SFT job", interval=0.5)


def _error_gone(page, testid: str) -> None:
    page.get_by_test_id(testid).wait_for(state="detached", timeout=5_000)


def test_evaluation_form_from_a_checkpoint_link_then_a_schedule(page, platform):
    client, _ = platform
    job = _trained_job(client)
    steps = sorted(c["step"] for c in client.get(f"/jobs/{job['id']}/checkpoints").json())
    assert steps == [10, 20], steps
    step = steps[0]  # not the latest: the link's checkpoint is the one chosen

    page.goto(f"{page.root}/ui/#/evaluations?new=1&job_id={job['id']}&checkpoint={step}")
    page.get_by_test_id("new-evaluation-form").wait_for()
    assert page.get_by_test_id("eval-target-job").is_checked()
    job_picker = page.get_by_test_id("eval-job")
    page.wait_for_function(  # the picker shows the job by name once the jobs are listed
        f"document.querySelector('[data-testid=eval-job]')?.value === '#{job['id']} {JOB_NAME}'"
    )
    assert job_picker.input_value() == f"#{job['id']} {JOB_NAME}"
    checkpoint = page.get_by_test_id("eval-checkpoint")
    page.wait_for_function("document.querySelectorAll('[data-testid=eval-checkpoint] option').length === 4")
    assert checkpoint.input_value() == str(step)
    assert [o.get_attribute("value") for o in checkpoint.locator("option").all()] == ["latest", "final", "20", "10"]

    # The benchmark picker is the server's registry; the form starts from evalDefaults.ts.
    defaults = _form_defaults()
    gsm8k = next(b for b in defaults["benchmarks"] if b["name"] == "gsm8k")
    generation = defaults["generation"]
    registry = [b["name"] for b in client.get("/evaluations/benchmarks").json()]
    boxes = page.get_by_test_id("eval-benchmarks").locator("input[type=checkbox]")
    page.wait_for_function(
        f"document.querySelectorAll('[data-testid=eval-benchmarks] input[type=checkbox]').length === {len(registry)}"
    )
    assert [b.get_attribute("data-benchmark") for b in boxes.all()] == registry
    assert [b.get_attribute("data-benchmark") for b in boxes.all() if b.is_checked()] == [
        b["name"] for b in defaults["benchmarks"]
    ]
    for other in defaults["benchmarks"]:  # gsm8k alone from here on (benchmarks.0)
        if other["name"] != "gsm8k":
            page.get_by_test_id(f"eval-benchmarks-pick-{other['name']}").uncheck()
    limit = page.get_by_test_id("field-benchmarks.0.limit")
    assert limit.input_value() == str(gsm8k.get("limit", ""))
    assert page.get_by_test_id("field-benchmarks.0.data").input_value() == gsm8k["data"]
    max_new_tokens = page.get_by_test_id("field-generation.max_new_tokens")
    assert max_new_tokens.input_value() == str(generation.get("max_new_tokens", ""))
    temperature = page.get_by_test_id("field-generation.temperature")
    if "temperature" not in generation:  # a default is a muted placeholder, not a value
        assert temperature.input_value() == "" and temperature.get_attribute("placeholder") == "default 0"
    if "max_new_tokens" in generation and "max_new_tokens" not in gsm8k:
        # A benchmark's empty option says what fills it: the generation default.
        page.get_by_test_id("eval-benchmarks-gsm8k-more").click()
        placeholder = page.get_by_test_id("field-benchmarks.0.max_new_tokens").get_attribute("placeholder")
        assert placeholder == f"from generation: {generation['max_new_tokens']}"

    before = client.get("/evaluations", params={"limit": 1}).json()["total"]
    submit = page.get_by_test_id("evaluation-submit")

    # No benchmark: a sentence at the picker, not pydantic's; ticking one clears it (its options remembered).
    page.get_by_test_id("eval-benchmarks-pick-gsm8k").uncheck()
    submit.click()
    error = page.get_by_test_id("eval-benchmarks-error")
    error.wait_for()
    assert error.inner_text() == "choose at least one benchmark"
    assert "List should have" not in page.get_by_test_id("new-evaluation-form").inner_text()
    page.get_by_test_id("eval-benchmarks-pick-gsm8k").check()
    _error_gone(page, "eval-benchmarks-error")
    assert limit.input_value() == str(gsm8k.get("limit", ""))

    # limit 0: the error at that field, gone once the field changes.
    limit.fill("0")
    submit.click()
    error = page.get_by_test_id("field-benchmarks.0.limit-error")
    error.wait_for()
    assert "must be >= 1" in error.inner_text()
    assert page.get_by_test_id("eval-form-problems").is_visible()
    limit.fill("3")
    _error_gone(page, "field-benchmarks.0.limit-error")
    assert client.get("/evaluations", params={"limit": 1}).json()["total"] == before  # nothing was queued

    # One generation field set, then submitted: the evaluation holds what the form set, nothing else.
    max_new_tokens.fill("8")
    submit.click()
    page.wait_for_url("**/#/evaluations/*")
    evaluation_id = int(page.url.rsplit("/", 1)[-1])
    created = client.get(f"/evaluations/{evaluation_id}").json()
    assert (created["source_job_id"], created["checkpoint_step"], created["benchmarks"]) == (job["id"], step, ["gsm8k"])
    request = client.get(f"/jobs/{evaluation_id}").json()["config"]["request"]
    assert request["benchmarks"] == [{**gsm8k, "limit": 3}]
    assert {k: v for k, v in request["generation"].items() if v is not None} == {**generation, "max_new_tokens": 8}
    assert (request["backend"], request["sandbox"], request["seed"]) == ({}, {}, 0)
    assert created["config"]["benchmarks"][0]["max_new_tokens"] == 8

    # A model link: the form opens with that model (the same page, another query).
    page.goto(f"{page.root}/ui/#/evaluations?new=1&model=demo/model")
    page.wait_for_function("document.querySelector('[data-testid=eval-model]')?.value === 'demo/model'")
    assert page.get_by_test_id("eval-target-model").is_checked()

    # The schedule form: a bad cron expression at its field; the job chosen with the keyboard in the picker.
    page.goto(f"{page.root}/ui/#/schedules")
    page.get_by_test_id("new-schedule").click()
    page.get_by_test_id("field-name").wait_for()
    page.get_by_test_id("field-name").fill("from the form")
    page.get_by_test_id("field-trigger").select_option("cron")
    picker = page.get_by_test_id("schedule-job")
    picker.click()
    picker.fill(JOB_NAME)
    page.get_by_test_id("schedule-job-option").first.wait_for()
    picker.press("Enter")
    assert picker.input_value() == f"#{job['id']} {JOB_NAME}"
    page.get_by_test_id("field-cron").fill("61 * * * *")
    page.get_by_test_id("schedule-submit").click()
    page.get_by_test_id("field-cron-error").wait_for()
    page.get_by_test_id("field-cron").fill("0 3 * * *")
    _error_gone(page, "field-cron-error")
    page.get_by_test_id("field-trigger").select_option("on_new_checkpoint")
    page.get_by_test_id("schedule-submit").click()
    page.get_by_test_id("new-schedule-form").wait_for(state="detached")
    schedules = client.get("/schedules", params={"job_id": job["id"]}).json()["items"]
    assert [(s["name"], s["trigger"], s["cron"]) for s in schedules] == [("from the form", "on_new_checkpoint", None)]
    assert schedules[0]["request"]["benchmarks"] == defaults["benchmarks"]
    assert client.delete(f"/schedules/{schedules[0]['id']}").status_code == 204

    wait(
        lambda: client.get(f"/evaluations/{evaluation_id}").json()["status"] == "succeeded",
        180,
        "the evaluation submitted from the form",
    )

"""The cockpit as one flow, in Chromium against `tp up`: an SFT job, then one click from its checkpoint to a GRPO
job (the launch form with model.path set) and to its evaluation (the form with the checkpoint chosen), then the
evaluation compared with the base model's: the demo's example evaluation asks in the format the demo model was
trained on, so the score moves after training."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from _e2e import wait, wait_text

from training_platform.demo.arithmetic import DEMO_EVAL_BENCHMARK, DEMO_EVAL_GENERATION

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def page(signed_in_page):
    return signed_in_page


def _finished(client, job_id: int, timeout: float, what: str) -> dict:
    return wait(
        lambda: (j := client.get(f"/jobs/{job_id}").json())["status"] in ("succeeded", "failed", "cancelled") and j,
        timeout,
        what,
    )


def test_sft_then_grpo_from_its_checkpoint_then_evaluate_and_compare_with_the_base(page, platform):
    client, _ = platform
    config = yaml.safe_load((REPO / "configs/examples/sft_tiny.yaml").read_text())
    job = client.post("/jobs", json={"name": "flow-sft", "config": config, "priority": 100}).json()
    sft = _finished(client, job["id"], 600, "the SFT job")
    assert sft["status"] == "succeeded", sft.get("error")
    final = f"{sft['run_dir']}/final"

    # "Train from this checkpoint": the launch form, model.path set, GRPO first and the other RL examples offered.
    page.goto(f"{page.root}/ui/#/jobs/{sft['id']}")
    page.get_by_test_id("job-train-from").click()
    page.get_by_test_id("launch-form").wait_for()
    wait_text(page, "handoff-model-path", final)
    wait_text(page, "launch-source", "grpo_tiny")
    assert page.get_by_test_id("handoff-example-dpo_tiny").is_visible(), "the preference examples are offered too"
    assert page.get_by_test_id("field-model.path").input_value() == final
    page.get_by_test_id("handoff-example-rloo_tiny").click()  # another example keeps the checkpoint
    wait_text(page, "launch-source", "rloo_tiny")
    assert page.get_by_test_id("field-model.path").input_value() == final
    page.get_by_test_id("handoff-example-grpo_tiny").click()
    page.get_by_test_id("field-training.max_steps").fill("2")
    wait_text(page, "validation-state", "valid", timeout=30_000)
    page.get_by_test_id("job-submit").click()
    page.wait_for_url("**/#/jobs/*")
    grpo_id = int(page.url.rsplit("/", 1)[-1])
    grpo = client.get(f"/jobs/{grpo_id}").json()
    assert grpo["algorithm"] == "grpo" and grpo["config"]["model"]["path"] == final

    # "Evaluate": the evaluation form with the job's final checkpoint chosen and the demo's example benchmark.
    page.goto(f"{page.root}/ui/#/jobs/{sft['id']}")
    page.get_by_test_id("job-evaluate").click()
    page.get_by_test_id("new-evaluation-form").wait_for()
    page.get_by_test_id("evaluation-submit").click()
    page.wait_for_url("**/#/evaluations/*")
    tuned_id = int(page.url.rsplit("/", 1)[-1])
    tuned = client.get(f"/evaluations/{tuned_id}").json()
    assert tuned["source_job_id"] == sft["id"] and tuned["benchmarks"] == ["gsm8k"]

    # The form's default is the demo's example evaluation: the demo model's own prompt format.
    spec = client.get(f"/evaluations/{tuned_id}").json()["config"]["benchmarks"][0]
    assert spec["prompt_template"] == DEMO_EVAL_BENCHMARK["prompt_template"] and spec["limit"] == 40, spec
    # The base model on the same evaluation.
    base_body = {
        "model": config["model"]["path"],
        "benchmarks": [DEMO_EVAL_BENCHMARK],
        "generation": DEMO_EVAL_GENERATION,
        "name": "flow-base",
    }
    response = client.post("/evaluations", json=base_body)
    assert response.status_code == 201, response.text
    base_id = response.json()["id"]
    for evaluation_id in (tuned_id, base_id):
        done = _finished(client, evaluation_id, 300, f"evaluation #{evaluation_id}")
        assert done["status"] == "succeeded", done.get("error")

    # "Compare with…" on the tuned model's evaluation: paired, item by item; the score moved with training.
    page.goto(f"{page.root}/ui/#/evaluations/{tuned_id}")
    page.get_by_test_id("eval-compare").wait_for()
    # The page is the one the form opened, from before the base evaluation existed: its candidates follow anyway.
    page.wait_for_function(
        f"[...document.querySelectorAll('[data-testid=eval-compare-with] option')].some(o => o.value === '{base_id}')",
        timeout=20_000,
    )
    page.get_by_test_id("eval-compare-with").select_option(str(base_id))
    row = page.get_by_test_id("eval-compare-gsm8k")
    row.wait_for()
    paired = client.get("/evaluations/compare", params={"a": tuned_id, "b": base_id}).json()
    stats = paired["benchmarks"]["gsm8k"]["paired"]
    assert stats["accuracy_a"] > stats["accuracy_b"] + 0.2, stats
    cells = row.locator("td").all_inner_texts()
    assert cells[1] == str(stats["n"]), cells
    tuned_accuracy = client.get(f"/evaluations/{tuned_id}").json()["metrics"]["gsm8k/accuracy"]["value"]
    assert tuned_accuracy == stats["accuracy_a"]

    grpo = _finished(client, grpo_id, 300, "the GRPO job from the SFT checkpoint")
    assert grpo["status"] == "succeeded", grpo.get("error")

    # Chat with the GRPO job: its A/B base is what it started from, the SFT job's final checkpoint.
    page.goto(f"{page.root}/ui/#/jobs/{grpo_id}")
    page.get_by_test_id("job-chat").click()
    page.get_by_test_id("pg-side-1").wait_for()
    assert page.get_by_test_id("pg-model-0").input_value() == f"job-{grpo_id}/final"
    assert page.get_by_test_id("pg-model-1").input_value() == f"job-{sft['id']}/final"
    assert page.get_by_test_id("pg-no-base").count() == 0

"""The Compare page in Chromium against `tp up`: two short SFT runs that differ in learning rate, each evaluated on
GSM8K; the page overlays their loss curves, diffs only the config keys that differ, shows the evaluations side by
side with confidence intervals and the paired McNemar significance; reached from the jobs list's bulk bar too; and a
sweep's grid points with mean ± standard error across seeds.

TP_SCREENSHOTS=1 also saves docs/screenshots/compare.png (off by default, so a test run does not rewrite the docs).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from _e2e import wait, wait_text

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.e2e, pytest.mark.slow]

GSM8K = {"name": "gsm8k", "data": "demo/data/gsm8k_eval.jsonl", "limit": 6}
TERMINAL = ("succeeded", "failed", "cancelled")


@pytest.fixture
def page(signed_in_page):
    return signed_in_page


def _config(learning_rate: float, max_steps: int) -> dict:
    config = yaml.safe_load((REPO / "configs/examples/sft_tiny.yaml").read_text())
    config["training"].update(learning_rate=learning_rate, max_steps=max_steps, save_steps=max_steps, logging_steps=2)
    config["training"].pop("eval_steps", None)
    config["data"].pop("eval_file", None)
    return config


def _trained_and_evaluated(client) -> tuple[list[dict], list[dict]]:
    """Two 20-step SFT runs (learning rates 2e-3 and 5e-3), each final model evaluated on 6 GSM8K items as soon as
    its run succeeds. Returns (jobs, evaluations)."""
    jobs = []
    for lr in (2e-3, 5e-3):
        response = client.post("/jobs", json={"name": f"compare lr={lr}", "config": _config(lr, 20)})
        assert response.status_code == 201, response.text
        jobs.append(response.json())
    evaluations: dict[int, dict] = {}

    def progressed():
        for job in jobs:
            if job["id"] in evaluations:
                continue
            current = client.get(f"/jobs/{job['id']}").json()
            assert current["status"] not in ("failed", "cancelled"), current["error"]
            if current["status"] == "succeeded":
                response = client.post(
                    "/evaluations",
                    json={
                        "job_id": job["id"],
                        "checkpoint": "final",
                        "benchmarks": [GSM8K],
                        "generation": {"max_new_tokens": 8},
                        "backend": {"num_threads": 1, "batch_size": 16},
                    },
                )
                assert response.status_code == 201, response.text
                evaluations[job["id"]] = response.json()
        if len(evaluations) < len(jobs):
            return False
        finals = [client.get(f"/evaluations/{evaluations[j['id']]['id']}").json() for j in jobs]
        for final in finals:
            assert final["status"] not in ("failed", "cancelled"), final["error"]
        return all(f["status"] == "succeeded" for f in finals) and finals

    finals = wait(progressed, 240, "two trained and evaluated jobs", interval=0.5)
    return jobs, finals


def test_compare_jobs_metrics_config_diff_evaluations_and_a_sweep(page, platform):
    client, _ = platform
    (a, b), (eval_a, eval_b) = _trained_and_evaluated(client)

    # From the jobs list: select both, the bulk bar offers Compare.
    page.reload()
    page.get_by_test_id(f"job-row-{b['id']}").wait_for()
    page.get_by_test_id(f"select-{a['id']}").check()
    assert page.get_by_test_id("bulk-compare").count() == 0, "Compare needs two jobs"
    page.get_by_test_id(f"select-{b['id']}").check()
    page.get_by_test_id("bulk-compare").click()
    page.wait_for_url(f"**/#/compare?jobs={a['id']},{b['id']}")
    page.get_by_test_id("compare-picker").wait_for()

    # The same comparison from its link.
    page.goto(f"{page.root}/ui/#/compare?jobs={a['id']},{b['id']}")
    for job in (a, b):
        wait_text(page, f"compare-job-{job['id']}", job["name"])
    page.get_by_test_id("compare-metric-loss").locator("canvas").first.wait_for()
    assert page.get_by_test_id("metric-toggle-loss").is_checked()

    # Only the keys that differ.
    wait_text(page, "config-diff", "training.learning_rate")
    diff = page.get_by_test_id("config-diff").inner_text()
    assert "model.path" not in diff and "training.max_steps" not in diff
    assert "0.002" in diff and "0.005" in diff
    assert "identical" in page.get_by_test_id("config-identical").inner_text()

    # Evaluations side by side, with the CI and n, and the paired significance of the two.
    wait_text(page, "compare-evals", "gsm8k/accuracy")
    row = page.get_by_test_id("eval-row-gsm8k/accuracy").inner_text()
    assert row.count("±") == 2 and row.count("n=6") == 2, row  # ± is the standard error everywhere
    cell_title = page.get_by_test_id("eval-row-gsm8k/accuracy").locator("td").nth(1).get_attribute("title")
    assert "standard error" in (cell_title or ""), cell_title
    evals = page.get_by_test_id("compare-evals").inner_text()
    assert f"evaluation #{eval_a['id']}" in evals and f"evaluation #{eval_b['id']}" in evals
    paired = page.get_by_test_id("paired-gsm8k")
    paired.wait_for()
    assert "p = " in page.get_by_test_id("paired-gsm8k-p").inner_text()
    verdict = page.get_by_test_id("paired-gsm8k-verdict").inner_text()
    assert verdict in ("significant at 0.05", "not significant")
    cmp = client.get("/evaluations/compare", params={"a": eval_a["id"], "b": eval_b["id"]}).json()
    significant = cmp["benchmarks"]["gsm8k"]["paired"]["mcnemar_p"] < 0.05
    assert verdict == ("significant at 0.05" if significant else "not significant")
    assert page.get_by_test_id("nav-compare").count() == 1
    if os.environ.get("TP_SCREENSHOTS") == "1":
        shots = REPO / "docs/screenshots"
        shots.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(shots / "compare.png"), full_page=True)

    # A sweep: its grid points (mean ± standard error across seeds), picked by URL; cancelled after.
    response = client.post(
        "/sweeps",
        json={
            "name": "compare-sweep",
            "config": _config(2e-3, 5),
            "grid": {"training.learning_rate": [1e-3, 3e-3]},
            "seeds": [0],
        },
    )
    assert response.status_code == 201, response.text
    sweep = response.json()
    try:
        page.goto(f"{page.root}/ui/#/compare?sweep={sweep['id']}")
        points = page.get_by_test_id("sweep-points")
        points.wait_for()
        page.wait_for_function("document.querySelectorAll('[data-testid=sweep-points] tbody tr').length === 2")
        assert "lr=0.001" in points.inner_text() and "lr=0.003" in points.inner_text()
        for job in sweep["jobs"]:
            page.get_by_test_id(f"compare-job-{job['id']}").wait_for()
        assert page.get_by_test_id("compare-sweep-select").input_value() == str(sweep["id"])
    finally:
        client.post(f"/sweeps/{sweep['id']}/cancel")

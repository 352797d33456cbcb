"""Regenerate the README and docs screenshots: a fresh `tp up` (temporary TP_DATA_DIR), an SFT job with an evaluation
of every 2nd checkpoint, a second SFT job with another learning rate, a GRPO job from the first one's final model,
then Chromium (Playwright) photographs every page of the cockpit.

    .venv/bin/python docs/screenshots.py
    # writes docs/screenshot-job.png, docs/screenshot-evaluations.png and docs/screenshots/*.png
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"


def wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise SystemExit(f"timed out waiting for {what}")


def main() -> int:
    data_dir = Path(tempfile.mkdtemp(prefix="tp-screenshots-"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    env.update(TP_DATA_DIR=str(data_dir), HF_HUB_OFFLINE="1", TP_SCHEDULE_TICK="1")
    up = subprocess.Popen(
        [sys.executable, "-m", "training_platform.cli", "up", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait(lambda: _ok(f"{base}/health"), 180, "tp up")
        token = (data_dir / "admin.token").read_text().strip()
        api = httpx.Client(base_url=f"{base}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=30)
        config = yaml.safe_load((REPO / "configs/examples/sft_tiny.yaml").read_text())
        config["training"].update(max_steps=600, save_steps=100, logging_steps=5, eval_steps=100)
        job = api.post("/jobs", json={"name": "sft arithmetic", "config": config}).json()
        # The demo's example evaluation: held-out sums in the demo model's own prompt format (the UI's default).
        from training_platform.demo.arithmetic import DEMO_EVAL_BENCHMARK, DEMO_EVAL_GENERATION

        bench = dict(DEMO_EVAL_BENCHMARK)
        api.post(
            "/schedules",
            json={
                "name": "every 2nd checkpoint",
                "trigger": "on_new_checkpoint",
                "job_id": job["id"],
                "every_n": 2,
                "keep_best_by": "gsm8k/accuracy",
                "benchmarks": [bench],
                "generation": DEMO_EVAL_GENERATION,
            },
        )
        wait(lambda: api.get(f"/jobs/{job['id']}").json()["status"] == "succeeded", 600, "the job")
        wait(
            lambda: (
                all(e["status"] == "succeeded" for e in api.get("/evaluations").json()["items"])
                and api.get("/evaluations").json()["total"] == 3
            ),
            300,
            "the evaluations",
        )
        # A second learning rate, both finals evaluated: the compare page's subject.
        config2 = yaml.safe_load(yaml.safe_dump(config))
        config2["training"].update(learning_rate=5e-4, eval_steps=None, save_steps=600)
        job2 = api.post("/jobs", json={"name": "sft arithmetic lr=5e-4", "config": config2}).json()
        wait(lambda: api.get(f"/jobs/{job2['id']}").json()["status"] == "succeeded", 600, "the second job")
        for j in (job, job2):
            api.post(
                "/evaluations",
                json={
                    "job_id": j["id"],
                    "checkpoint": "final",
                    "benchmarks": [bench],
                    "generation": DEMO_EVAL_GENERATION,
                },
            )
        wait(
            lambda: (
                all(e["status"] == "succeeded" for e in api.get("/evaluations").json()["items"])
                and api.get("/evaluations").json()["total"] == 5
            ),
            300,
            "the final evaluations",
        )
        api.patch(f"/jobs/{job['id']}", json={"tags": ["baseline", "arithmetic"], "note": "the demo's SFT, lr 2e-3"})
        api.patch(f"/jobs/{job2['id']}", json={"tags": ["arithmetic"], "note": "a lower learning rate"})
        grpo = yaml.safe_load((REPO / "configs/examples/grpo_tiny.yaml").read_text())
        grpo["model"]["path"] = f"runs/job-{job['id']}/final"
        grpo["training"].update(max_steps=30, logging_steps=2, save_steps=30)
        rl = api.post("/jobs", json={"name": "grpo from the sft model", "config": grpo}).json()
        wait(lambda: api.get(f"/jobs/{rl['id']}").json()["status"] == "succeeded", 600, "the GRPO job")
        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=["--no-sandbox"])
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            context.add_init_script(f"localStorage.setItem('tp_token', {token!r})")  # signed in from the start
            page = context.new_page()
            page.goto(f"{base}/ui/#/jobs/{job['id']}")
            page.get_by_test_id("metrics-chart").locator("canvas").first.wait_for()
            time.sleep(2)
            page.screenshot(path=str(DOCS / "screenshot-job.png"))
            page.goto(f"{base}/ui/#/evaluations")
            page.get_by_test_id("leaderboard-benchmark").select_option("gsm8k")
            time.sleep(2)
            page.screenshot(path=str(DOCS / "screenshot-evaluations.png"))
            _cockpit(page, base, job, job2, rl, api)
            browser.close()
        print(f"wrote {DOCS / 'screenshot-job.png'}, {DOCS / 'screenshot-evaluations.png'} and {SHOTS}/*.png")
        return 0
    finally:
        os.killpg(up.pid, signal.SIGTERM)
        up.wait(timeout=90)


SHOTS = DOCS / "screenshots"


def _cockpit(page, base: str, job: dict, job2: dict, rl: dict, api: httpx.Client) -> None:
    """One screenshot per cockpit page (docs/screenshots/)."""
    SHOTS.mkdir(exist_ok=True)

    def shot(name: str, full: bool = True) -> None:
        time.sleep(1.5)
        page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=full)

    page.goto(f"{base}/ui/#/launch?from_job={job['id']}")
    page.get_by_test_id("launch-form").wait_for()
    page.wait_for_function("document.querySelector('[data-testid=launch-source]')?.innerText.includes('job #')")
    page.get_by_test_id("field-training.learning_rate").fill("-1")  # a field error, shown as the user types
    page.get_by_test_id("field-training.learning_rate-error").wait_for()
    shot("launch")
    page.goto(f"{base}/ui/#/jobs?cols=loss,eval,reward")
    page.get_by_test_id("jobs-table").wait_for()
    shot("jobs")
    page.goto(f"{base}/ui/#/evaluations?new=1&job_id={job2['id']}&checkpoint=final")
    page.get_by_test_id("new-evaluation-form").wait_for()
    shot("evaluation-form")
    evaluations = api.get("/evaluations", params={"limit": 50}).json()["items"]  # newest first
    tuned = next(e for e in evaluations if e["source_job_id"] == job["id"])
    other = next(e for e in evaluations if e["source_job_id"] == job2["id"])
    page.goto(f"{base}/ui/#/evaluations/{tuned['id']}")
    page.get_by_test_id("eval-compare").wait_for()
    page.wait_for_function(
        "[...document.querySelectorAll('[data-testid=eval-compare-with] option')]"
        f".some(o => o.value == '{other['id']}')"
    )
    page.get_by_test_id("eval-compare-with").select_option(str(other["id"]))
    page.get_by_test_id("eval-compare-table").wait_for()
    shot("evaluation-compare")
    page.goto(f"{base}/ui/#/jobs/{job['id']}")
    page.get_by_test_id("metrics-chart").locator("canvas").first.wait_for()
    shot("job-charts")
    page.goto(f"{base}/ui/#/jobs/{rl['id']}")
    page.get_by_test_id("rollout-row-0").wait_for()
    page.get_by_test_id("rollout-row-0").click()
    shot("rollouts")
    page.get_by_test_id("log-search").fill("checkpoint")
    page.get_by_test_id("log-panel").scroll_into_view_if_needed()
    shot("logs")
    page.goto(f"{base}/ui/#/compare?jobs={job['id']},{job2['id']}")
    page.get_by_test_id("config-diff").wait_for()
    page.locator("[data-testid^=paired-]").first.wait_for()
    shot("compare")
    page.goto(f"{base}/ui/#/playground?model=job-{job['id']}/final&base_path=demo/model")
    page.get_by_test_id("pg-input").fill("6+8=")
    page.get_by_test_id("pg-send").click()
    page.get_by_test_id("pg-usage-0").wait_for(timeout=120_000)
    page.get_by_test_id("pg-usage-1").wait_for(timeout=120_000)
    shot("playground")


def _ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    sys.exit(main())

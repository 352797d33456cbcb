"""Evaluation through the running platform (`tp up`: API + train worker + eval worker + beat):

- a training job with an `on_new_checkpoint` schedule: every 2nd checkpoint is evaluated while the job still
  trains, results attach to the checkpoints, the best checkpoint is kept;
- POST /evaluations of the trained model on a synthetic GSM8K-format set, through API + eval worker, with the same
  numbers and per-sample outputs as `tp eval run` on the same model, data and settings;
- a cron schedule fired by Celery beat, then disabled;
- the leaderboard, per-sample records with pagination, the comparison of two checkpoints.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from _e2e import wait

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
EVAL_SET = "evalsets/arithmetic_gsm8k.jsonl"
# The SFT data's own prompt format ("6+8="), so a trained checkpoint can answer; scored as GSM8K (flexible: the
# last number of the output).
GSM8K = {"name": "gsm8k", "data": EVAL_SET, "prompt_template": "{question}", "limit": 40}
GENERATION = {"max_new_tokens": 8}
BACKEND = {"num_threads": 1, "batch_size": 16}
TERMINAL = ("succeeded", "failed", "cancelled")


def _write_eval_set(data_dir: Path) -> Path:
    """Held-out addition problems (demo sft_eval) in the official GSM8K format: question + answer '... #### N'."""
    rows = []
    for line in (data_dir / "demo/data/sft_eval.jsonl").read_text().splitlines():
        messages = json.loads(line)["messages"]
        question, answer = messages[0]["content"], messages[1]["content"]
        rows.append({"question": question, "answer": f"{question}{answer}\n#### {answer}"})
    path = data_dir / EVAL_SET
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _train_config(**training) -> dict:
    config = yaml.safe_load((REPO / "configs/examples/sft_tiny.yaml").read_text())
    config["training"].update({"logging_steps": 10, **training})
    config["training"].pop("eval_steps", None)
    config["data"].pop("eval_file", None)
    return config


def _get(client, path: str, **params) -> dict:
    response = client.get(path, params=params)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture(scope="module")
def trained(platform):
    """A 400-step SFT job, a checkpoint every 50 steps (keep the last 2), watched by a schedule that evaluates its
    every 2nd checkpoint and keeps the best by gsm8k/accuracy. Returns when the job and its evaluations ended."""
    client, data_dir = platform
    _write_eval_set(data_dir)
    response = client.post(
        "/jobs",
        json={
            "name": "sft to evaluate",
            "config": _train_config(max_steps=400, save_steps=50, keep_last_checkpoints=2),
        },
    )
    assert response.status_code == 201, response.text
    job = response.json()
    response = client.post(
        "/schedules",
        json={
            "name": "every 2nd checkpoint",
            "trigger": "on_new_checkpoint",
            "job_id": job["id"],
            "every_n": 2,
            "benchmarks": [GSM8K],
            "generation": GENERATION,
            "backend": BACKEND,
            "keep_best_by": "gsm8k/accuracy",
        },
    )
    assert response.status_code == 201, response.text
    schedule = response.json()

    started_while_training = []

    def done():
        current = _get(client, f"/jobs/{job['id']}")
        evals = _get(client, "/evaluations", schedule_id=schedule["id"])["items"]
        if current["status"] == "running":
            started_while_training.extend(e["id"] for e in evals if e["status"] in ("running", "succeeded"))
        if current["status"] in TERMINAL and len(evals) == 4 and all(e["status"] in TERMINAL for e in evals):
            return current, evals
        assert current["status"] in ("queued", "preflight", "running", "succeeded"), current
        return None

    final, evals = wait(done, 600, "the training job and its 4 checkpoint evaluations", interval=0.5)
    return {
        "job": final,
        "schedule": schedule,
        "evals": sorted(evals, key=lambda e: e["checkpoint_step"]),
        "started_while_training": set(started_while_training),
    }


def test_checkpoint_trigger_evaluates_every_second_checkpoint_while_training_runs(platform, trained):
    client, _ = platform
    job, evals = trained["job"], trained["evals"]
    assert job["status"] == "succeeded", job
    assert [e["checkpoint_step"] for e in evals] == [100, 200, 300, 400]  # checkpoints #2, #4, #6, #8
    assert all(e["status"] == "succeeded" for e in evals), [(e["id"], e["status"], e["error"]) for e in evals]
    assert all(e["source_job_id"] == job["id"] and e["schedule_id"] == trained["schedule"]["id"] for e in evals)
    # The first evaluation ran while the job was still training (its own worker, not behind the training job).
    assert trained["started_while_training"], "no evaluation ran while the training job was running"
    first = _get(client, f"/jobs/{evals[0]['id']}")
    assert first["started_at"] < job["finished_at"]

    # Results attach to the checkpoints.
    checkpoints = {c["step"]: c for c in _get(client, f"/jobs/{job['id']}/checkpoints")}
    for e in evals:
        attached = checkpoints[e["checkpoint_step"]]
        assert attached["evaluation_id"] == e["id"]
        assert attached["eval_metrics"]["gsm8k/accuracy"] == e["metrics"]["gsm8k/accuracy"]["value"]
    # Training really learned: the last checkpoint answers more held-out sums than the first one evaluated.
    accuracy = [e["metrics"]["gsm8k/accuracy"]["value"] for e in evals]
    from datetime import datetime

    def ts(value: str) -> float:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()

    lag = [ts(e["created_at"]) - ts(checkpoints[e["checkpoint_step"]]["created_at"]) for e in evals]
    took = [ts(e["finished_at"]) - ts(e["created_at"]) for e in evals]
    print(
        f"\n[e2e eval] accuracy by checkpoint {dict(zip([100, 200, 300, 400], accuracy, strict=True))}; "
        f"checkpoint registered -> evaluation queued {max(lag):.2f}s max; queued -> succeeded "
        f"{min(took):.1f}-{max(took):.1f}s; training finished {job['finished_at']}"
    )
    assert accuracy[-1] > accuracy[0], accuracy
    assert all(e["metrics"]["gsm8k/accuracy"]["n"] == 40 for e in evals)

    schedule = _get(client, f"/schedules/{trained['schedule']['id']}")
    assert schedule["fired_count"] == 4 and schedule["last_checkpoint_step"] == 400


def test_best_checkpoint_is_recorded_exposed_and_kept(platform, trained):
    client, _ = platform
    job = _get(client, f"/jobs/{trained['job']['id']}")
    evals = trained["evals"]
    best_value = max(e["metrics"]["gsm8k/accuracy"]["value"] for e in evals)
    best_step = min(e["checkpoint_step"] for e in evals if e["metrics"]["gsm8k/accuracy"]["value"] == best_value)
    best = job["best_checkpoint"]
    assert best["metric"] == "gsm8k/accuracy" and best["step"] == best_step and best["value"] == best_value
    assert _get(client, f"/jobs/{job['id']}/best_checkpoint") == best
    assert _get(client, f"/jobs/{job['id']}/best_checkpoint", metric="gsm8k/accuracy")["step"] == best_step
    checkpoints = {c["step"]: c for c in _get(client, f"/jobs/{job['id']}/checkpoints")}
    assert checkpoints[best_step]["is_best"] and not checkpoints[best_step]["removed"]
    assert Path(best["path"]).is_dir(), "the best checkpoint survives rotation (keep_last_checkpoints: 2)"
    # Only the best one is still pinned; the evaluations released theirs.
    pins = sorted(p.name for p in (Path(job["run_dir"]) / "pins").iterdir())
    assert pins == [f"step_{best_step:06d}.best"]
    # Rotation still works around the pins: the last two and the best are there, older ones went.
    live = {s for s, c in checkpoints.items() if not c["removed"]}
    assert {350, 400, best_step} <= live and len(live) <= 4, live
    assert any(c["removed"] for c in checkpoints.values())


def test_evaluation_through_api_and_worker_matches_the_cli(platform, trained):
    client, data_dir = platform
    job = trained["job"]
    response = client.post(
        "/evaluations",
        json={
            "job_id": job["id"],
            "checkpoint": "final",
            "benchmarks": [GSM8K],
            "generation": GENERATION,
            "backend": BACKEND,
        },
    )
    assert response.status_code == 201, response.text
    evaluation = response.json()
    assert evaluation["status"] == "queued" and evaluation["model"].endswith("final")
    final = wait(
        lambda: (e := _get(client, f"/evaluations/{evaluation['id']}"))["status"] in TERMINAL and e,
        180,
        "the evaluation",
    )
    assert final["status"] == "succeeded", final["error"]
    assert final["progress"] == 100
    assert final["summary"]["benchmarks"]["gsm8k"]["n_items"] == 40
    api_metrics = final["metrics"]

    # The same model, data and settings through `tp eval run`.
    out = data_dir / "cli_eval"
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "training_platform.cli",
            "eval",
            "run",
            "--model",
            final["model_path"],
            "--benchmarks",
            "gsm8k",
            "--data",
            f"gsm8k={data_dir / EVAL_SET}",
            "--limit",
            "40",
            "--max-new-tokens",
            "8",
            "--batch-size",
            "16",
            "--threads",
            "1",
            "--set",
            "gsm8k.prompt_template={question}",
            "--no-progress",
            "--output",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        env=_env(data_dir),
    )
    assert cli.returncode == 0, cli.stderr[-3000:]
    cli_summary = json.loads((out / "summary.json").read_text())
    for name, metric in cli_summary["benchmarks"]["gsm8k"]["metrics"].items():
        assert api_metrics[f"gsm8k/{name}"]["value"] == metric["value"], name
    cli_samples = [json.loads(line) for line in (out / "samples/gsm8k.jsonl").read_text().splitlines()]

    # Per-sample records, paginated, in file order, equal to the CLI's.
    page1 = _get(client, f"/evaluations/{final['id']}/samples", limit=25)
    page2 = _get(client, f"/evaluations/{final['id']}/samples", limit=25, offset=25)
    assert page1["total"] == 40 and len(page1["items"]) == 25 and len(page2["items"]) == 15
    samples = page1["items"] + page2["items"]
    assert [s["position"] for s in samples] == list(range(40))
    assert [(s["output"], s["extracted"], s["correct"]) for s in samples] == [
        (s["output"], s["extracted"], s["correct"]) for s in cli_samples
    ]
    wrong = _get(client, f"/evaluations/{final['id']}/samples", correct="false", limit=100)
    n_correct = round(api_metrics["gsm8k/accuracy"]["value"] * 40)
    assert wrong["total"] == 40 - n_correct and all(s["correct"] is False for s in wrong["items"])
    report = client.get(f"/evaluations/{final['id']}/report")
    assert report.status_code == 200 and "gsm8k" in report.text


def _env(data_dir: Path) -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    env.update(TP_DATA_DIR=str(data_dir), HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return env


def test_leaderboard_and_comparison(platform, trained):
    client, _ = platform
    board = _get(client, "/evaluations/leaderboard", benchmark="gsm8k")
    assert board["metric"] == "accuracy"
    values = [entry["value"] for entry in board["items"]]
    assert values == sorted(values, reverse=True) and [e["rank"] for e in board["items"]] == list(
        range(1, len(values) + 1)
    )
    steps = {e["checkpoint_step"] for e in board["items"] if e["source_job_id"] == trained["job"]["id"]}
    assert {100, 200, 300, 400} <= steps
    only_job = _get(client, "/evaluations/leaderboard", benchmark="gsm8k", job_id=trained["job"]["id"])
    assert all(e["source_job_id"] == trained["job"]["id"] for e in only_job["items"])

    first, last = trained["evals"][0], trained["evals"][-1]
    cmp = _get(client, "/evaluations/compare", a=first["id"], b=last["id"])
    counts = cmp["benchmarks"]["gsm8k"]["counts"]
    assert sum(counts[k] for k in ("both_correct", "both_wrong", "fixed", "broken")) == 40
    delta = last["metrics"]["gsm8k/accuracy"]["value"] - first["metrics"]["gsm8k/accuracy"]["value"]
    assert counts["fixed"] - counts["broken"] == round(delta * 40)
    assert cmp["benchmarks"]["gsm8k"]["same_data"] is True


def test_cron_schedule_fires_through_beat(platform):
    client, _ = platform
    response = client.post(
        "/schedules",
        json={
            "name": "cron every 2 s",
            "trigger": "cron",
            "cron": "* * * * * */2",
            "model": "demo-tiny",
            "benchmarks": [{**GSM8K, "limit": 4}],
            "generation": GENERATION,
            "backend": BACKEND,
        },
    )
    assert response.status_code == 201, response.text
    schedule = response.json()
    assert schedule["next_fire_at"] is not None

    def fired_and_evaluated():
        evals = _get(client, "/evaluations", schedule_id=schedule["id"])["items"]
        return [e for e in evals if e["status"] == "succeeded"]

    done = wait(fired_and_evaluated, 120, "a cron-fired evaluation to succeed", interval=0.5)
    assert done[0]["model"] == "demo-tiny" and done[0]["metrics"]["gsm8k/accuracy"]["n"] == 4

    response = client.patch(f"/schedules/{schedule['id']}", json={"enabled": False})
    assert response.status_code == 200 and response.json()["enabled"] is False
    fired = _get(client, f"/schedules/{schedule['id']}")["fired_count"]
    assert fired >= 1
    wait(lambda: _get(client, f"/schedules/{schedule['id']}")["fired_count"] == fired, 3, "a stable count")
    import time

    time.sleep(5)  # 2 more cron times and 5 beat ticks pass: a disabled schedule does not fire
    assert _get(client, f"/schedules/{schedule['id']}")["fired_count"] == fired


def test_bad_evaluation_requests_are_refused_with_field_paths(platform, trained):
    client, _ = platform
    count = _get(client, "/evaluations")["total"]
    response = client.post(
        "/evaluations",
        json={
            "job_id": trained["job"]["id"],
            "checkpoint": 12345,
            "benchmarks": [{"name": "gsm8k"}, "nope"],
            "generation": {"temperature": -1},
            "keep_best_by": "gsm8k/acc",
        },
    )
    assert response.status_code == 422
    locs = {e["loc"]: e["msg"] for e in response.json()["detail"]}
    assert "no checkpoint at step 12345" in locs["checkpoint"]
    assert "unknown benchmark 'nope'" in locs["benchmarks.1.name"]
    assert _get(client, "/evaluations")["total"] == count

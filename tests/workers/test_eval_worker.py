"""Evaluation jobs on a real Celery worker consuming the `eval` queue (SQLite, real Redis): cancel while it
generates, a bad data row failing the preflight with its line, an evaluation crash recorded with its traceback,
a rotated-away checkpoint refused."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from _wk import wait_for

from training_platform.db.models import Evaluation
from training_platform.db.session import session_scope
from training_platform.evaluation.request import EvalRequest
from training_platform.services import evaluations as eval_service

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def eval_worker(platform, demo_assets):
    from training_platform.core.settings import get_settings

    mp = pytest.MonkeyPatch()
    mp.setenv("TP_MODEL_ROOTS", str(demo_assets.resolve()))  # demo/ links outside TP_DATA_DIR here
    get_settings.cache_clear()
    proc = platform.start_worker("ev1", queues="eval", env={"TP_MODEL_ROOTS": str(demo_assets.resolve())})
    yield proc
    proc.stop()
    mp.undo()
    get_settings.cache_clear()


def _submit(
    platform, benchmarks: list, generation: dict | None = None, model: str = "demo/model", batch_size: int = 8
) -> int:
    from training_platform.core.settings import get_settings
    from training_platform.taskqueue.wake import wake_worker

    owner = platform.user()
    settings = get_settings()
    request = EvalRequest.model_validate(
        {
            "benchmarks": benchmarks,
            "generation": generation or {},
            "backend": {"num_threads": 1, "batch_size": batch_size},
        }
    )
    with session_scope() as s:
        target = eval_service.resolve_target(
            s, owner, model=model, job_id=None, checkpoint=None, backend="transformers", settings=settings
        )
        config = eval_service.absolute_data_paths(request.to_config(target.model_path), settings)
        job = eval_service.create_evaluation(s, owner=owner, name="t", config=config, target=target)
        job_id = job.id
    wake_worker("eval")
    return job_id


def test_cancel_stops_a_running_evaluation(platform, eval_worker):
    # 66 items x 256 new tokens, one at a time: long enough to be cancelled in the middle.
    job_id = _submit(
        platform, [{"name": "gsm8k", "data": "demo/data/gsm8k_eval.jsonl"}], {"max_new_tokens": 256}, batch_size=1
    )
    wait_for(
        lambda: platform.job(job_id).status == "running" and platform.job(job_id).current_step > 0,
        120,
        what="the evaluation to make progress",
    )
    t0 = time.monotonic()
    platform.set_cancel(job_id)
    job = platform.wait_status(job_id, {"cancelled", "failed", "succeeded"}, timeout=60)
    print(f"\ncancel -> cancelled {time.monotonic() - t0:.1f}s at {job.current_step}%")
    assert job.status == "cancelled", job.error
    assert 0 < job.current_step < 100
    assert platform.events(job_id)[-1][2] == "cancelled by user (evaluation stopped)"
    with session_scope() as s:
        assert s.get(Evaluation, job_id).summary is None  # nothing half-stored


def test_a_bad_row_fails_the_preflight_with_its_line(platform, eval_worker):
    bad = platform.data_dir / "users" / "alice" / "bad_gsm8k.jsonl"  # the submitter's own area
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_text(
        json.dumps({"question": "1+1?", "answer": "#### 2"})
        + "\n"
        + json.dumps({"question": "2+2?", "answer": "four"})
        + "\n"
    )
    job_id = _submit(platform, [{"name": "gsm8k", "data": str(bad)}])
    job = platform.wait_status(job_id, {"failed", "succeeded"}, timeout=90)
    assert job.status == "failed"
    assert job.error.startswith("preflight failed: benchmarks:")
    assert "bad_gsm8k.jsonl:2" in job.error and "no final answer" in job.error
    checks = [c["name"] for c in job.preflight["checks"]]
    assert job.preflight["ok"] is False and checks == ["config", "paths", "model", "data"]
    assert [e[1] for e in platform.events(job_id)] == ["queued", "preflight", "failed"]


def test_a_crash_during_the_evaluation_is_recorded_with_its_traceback(platform, eval_worker):
    # A model directory whose weights cannot be loaded: config.json is there (the preflight passes), the
    # safetensors file is garbage (loading fails in the run).
    broken = platform.data_dir / "users" / "alice" / "broken_model"  # the submitter's own area
    broken.mkdir(parents=True)
    src = platform.data_dir / "demo" / "model"
    for f in src.iterdir():
        (broken / f.name).write_bytes(f.read_bytes())
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    job_id = _submit(platform, [{"name": "gsm8k", "data": "demo/data/gsm8k_eval.jsonl", "limit": 2}], model=str(broken))
    job = platform.wait_status(job_id, {"failed", "succeeded"}, timeout=90)
    assert job.status == "failed" and job.error.startswith("evaluation failed: "), job.error
    error = json.loads((Path(job.run_dir) / "error.json").read_text())
    assert "Traceback" in error["traceback"] and error["type"]
    assert "FAILED" in (Path(job.run_dir) / "eval.log").read_text()

"""An eval worker dies mid-evaluation (kill -9 of the Celery main process): beat's recovery sweep requeues the eval
job and another eval worker runs it again from the start; the stored results are those of the complete second run,
none twice."""

from __future__ import annotations

import os
import signal
import time

import pytest
from _wk import wait_for
from sqlalchemy import func
from sqlmodel import select

from training_platform.db.models import EvalSample
from training_platform.db.session import session_scope
from training_platform.evaluation.request import EvalRequest
from training_platform.services import evaluations as eval_service

pytestmark = pytest.mark.integration


def test_kill_9_of_the_eval_worker_requeues_and_completes_the_evaluation(platform, demo_assets):
    from training_platform.core.settings import get_settings
    from training_platform.taskqueue.wake import wake_worker

    roots = {"TP_MODEL_ROOTS": str(demo_assets.resolve())}  # demo/ links outside TP_DATA_DIR here
    mp = pytest.MonkeyPatch()
    mp.setenv("TP_MODEL_ROOTS", roots["TP_MODEL_ROOTS"])
    get_settings.cache_clear()
    try:
        platform.start_beat(env={"TP_HEARTBEAT_TIMEOUT": "5", "TP_RECOVERY_INTERVAL": "1", **roots})
        worker_a = platform.start_worker("eva", queues="eval", env=roots)
        owner = platform.user()
        request = EvalRequest.model_validate(
            {
                "benchmarks": [{"name": "gsm8k", "data": "demo/data/gsm8k_eval.jsonl"}],
                "generation": {"max_new_tokens": 128},
                "backend": {"batch_size": 2, "num_threads": 1},
            }
        )
        with session_scope() as s:
            target = eval_service.resolve_target(
                s,
                owner,
                model="demo/model",
                job_id=None,
                checkpoint=None,
                backend="transformers",
                settings=get_settings(),
            )
            config = eval_service.absolute_data_paths(request.to_config(target.model_path), get_settings())
            job_id = eval_service.create_evaluation(s, owner=owner, name="survivor", config=config, target=target).id
        wake_worker("eval")

        wait_for(
            lambda: platform.job(job_id).status == "running" and platform.job(job_id).current_step >= 5,
            120,
            what="the evaluation to make progress",
        )
        t_kill = time.time()
        os.kill(worker_a.pid, signal.SIGKILL)
        platform.start_worker("evb", queues="eval", env=roots)
        job = platform.wait_status(job_id, {"succeeded", "failed", "cancelled"}, timeout=240)
        assert job.status == "succeeded", job.error
        assert job.attempts == 2 and job.current_step == 100

        events = platform.events(job_id)
        assert [e[1] for e in events] == [
            "queued",
            "preflight",
            "running",
            "queued",
            "preflight",
            "running",
            "succeeded",
        ]
        assert events[3][2].startswith("worker lost: heartbeat stale since")
        print(
            f"\n[eval recovery] kill -9 -> requeued {events[3][3].timestamp() - t_kill:.1f}s, "
            f"-> succeeded {events[-1][3].timestamp() - t_kill:.1f}s"
        )
        with session_scope() as s:
            n = s.exec(select(func.count()).select_from(EvalSample).where(EvalSample.job_id == job_id)).one()
            positions = s.exec(select(EvalSample.position).where(EvalSample.job_id == job_id)).all()
        assert n == 66 and sorted(positions) == list(range(66))
    finally:
        mp.undo()
        get_settings.cache_clear()

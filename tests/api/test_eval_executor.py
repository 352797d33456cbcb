"""`executor` (auto | local | ray) and `workers` of POST /evaluations and /schedules, on SQLite and PostgreSQL:
"auto" decided at submission (local without a cluster and for small inputs), ray refused naming `executor` without
a cluster, with one that does not answer and for an endpoint's model; an evaluation submitted with executor ray
run by the eval worker's code in this process on the session's 2-node Ray cluster (`ray_cluster`), scoring every
item as the local run does and showing its workers' progress; the auto-evaluation of a checkpoint of a job trained
on the cluster choosing ray. The choice itself as unit tests at the end."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import func
from sqlmodel import select

from training_platform.db import crud
from training_platform.db.models import Checkpoint, EvalSchedule, Job, User
from training_platform.db.session import session_scope
from training_platform.services import evaluations as eval_service

pytestmark = pytest.mark.integration

UNREACHABLE = "127.0.0.1:9"  # discard: nothing listens
GSM8K = {"name": "gsm8k", "data": "demo/data/gsm8k_eval.jsonl", "limit": 8}
# batch_size 2: 8 items make 4 batches, so both Ray workers get some (whole batches, as the local run forms them)
SMALL = {"benchmarks": [GSM8K], "generation": {"max_new_tokens": 4}, "backend": {"num_threads": 1, "batch_size": 2}}


def _locs(response) -> dict[str, str]:
    assert response.status_code == 422, response.text
    return {e["loc"]: e["msg"] for e in response.json()["detail"]}


def _counts() -> dict[str, int]:
    with session_scope() as s:
        return {m.__name__: s.exec(select(func.count()).select_from(m)).one() for m in (Job, EvalSchedule)}


@pytest.fixture
def cluster_setting(monkeypatch) -> Iterator[Callable[..., None]]:
    """Set the platform's TP_RAY_ADDRESS / TP_RAY_MIN_ROWS for the API and the worker code of this test."""
    from training_platform.core.settings import get_settings

    def use(address: str | None, min_rows: int | None = None) -> None:
        if address is None:
            monkeypatch.delenv("TP_RAY_ADDRESS", raising=False)
        else:
            monkeypatch.setenv("TP_RAY_ADDRESS", address)
        if min_rows is None:
            monkeypatch.delenv("TP_RAY_MIN_ROWS", raising=False)
        else:
            monkeypatch.setenv("TP_RAY_MIN_ROWS", str(min_rows))
        get_settings.cache_clear()

    use(None)
    yield use
    monkeypatch.undo()
    get_settings.cache_clear()


def _run_queued_evaluations() -> None:
    """What the eval worker does for each wake-up, here in the test process."""
    from training_platform.workers.eval_tasks import EvalJobSupervisor
    from training_platform.workers.supervisor import run_next_job

    while run_next_job("eval", worker="test-worker:1", supervisor_class=EvalJobSupervisor) is not None:
        pass


def _training_job(api, resources: dict) -> int:
    """A training job of alice's with one checkpoint (a copy of the demo model), as a training worker leaves it."""
    with session_scope() as s:
        user = s.get(User, api.user_ids["alice"])
        config = {"algorithm": {"name": "sft"}, "resources": resources}
        job = crud.create_job(s, owner=user, name="trained", config=config)
        run_dir = api.data_dir / "runs" / f"executor-job-{job.id}-{uuid.uuid4().hex[:8]}"
        job.run_dir = str(run_dir)
        s.add(job)
        path = run_dir / "checkpoints" / "step_000010"
        shutil.copytree(api.data_dir / "demo" / "model", path)
        s.add(Checkpoint(job_id=job.id, step=10, path=str(path), sha256="0" * 64, size_bytes=1))
        return job.id


def test_auto_runs_locally_without_a_cluster_and_for_small_inputs(api, cluster_setting):
    body = {"model": "demo/model", **SMALL}
    created = api.post("/evaluations", json=body)  # no TP_RAY_ADDRESS; executor defaults to auto
    assert created.status_code == 201, created.text
    executor = created.json()["executor"]
    assert executor["name"] == "local" and executor["workers"] == 1 and executor["requested"] == "auto"
    assert "no Ray cluster" in executor["reason"]
    with session_scope() as s:
        request = s.get(Job, created.json()["id"]).config["request"]
    assert request["executor"] == "local" and request["workers"] is None  # "auto" resolved in the stored request

    # a cluster, but 8 items are not more than TP_RAY_MIN_ROWS (the default 200000): local, the cluster not asked
    cluster_setting(UNREACHABLE)
    small = api.post("/evaluations", json={**body, "executor": "auto", "workers": 4})
    assert small.status_code == 201, small.text
    assert small.json()["executor"] == {
        "name": "local",
        "workers": 1,
        "requested": "auto",
        "reason": "auto: 8 items, not more than 200000 (TP_RAY_MIN_ROWS)",
        "progress": [],
    }
    # above the threshold auto chooses ray, and a cluster that does not answer is refused naming `executor`
    cluster_setting(UNREACHABLE, min_rows=5)
    locs = _locs(api.post("/evaluations", json=body))
    assert set(locs) == {"executor"} and UNREACHABLE in locs["executor"] and "more than 5 items" in locs["executor"]
    for response in (created, small):
        assert api.post(f"/jobs/{response.json()['id']}/cancel").status_code == 200


def test_ray_without_a_cluster_or_unreachable_is_refused_naming_executor(api, cluster_setting):
    job_id = _training_job(api, {"launcher": "ray", "num_nodes": 2})
    before = _counts()
    ray = {"model": "demo/model", **SMALL, "executor": "ray"}
    schedule = {"name": "s", "trigger": "on_new_checkpoint", "job_id": job_id, **SMALL, "executor": "ray"}
    for body, path in ((ray, "/evaluations"), (schedule, "/schedules")):
        locs = _locs(api.post(path, json=body))
        assert set(locs) == {"executor"} and "TP_RAY_ADDRESS" in locs["executor"], (path, locs)
    cases = [
        ({**ray, "workers": 0}, {"workers": "must be >= 1"}),
        ({**ray, "workers": 65}, {"workers": "must be <= 64"}),
        ({**ray, "executor": "spark"}, {"executor": "auto"}),
        ({**ray, "executor": "local", "workers": 2}, {"workers": "the local executor runs one worker"}),
    ]
    for body, expected in cases:
        locs = _locs(api.post("/evaluations", json=body))
        for loc, fragment in expected.items():
            assert loc in locs and fragment in locs[loc], (body, locs)

    cluster_setting(UNREACHABLE)
    for body, path in ((ray, "/evaluations"), (schedule, "/schedules")):
        locs = _locs(api.post(path, json=body))
        assert set(locs) == {"executor"}, (path, locs)
        assert locs["executor"].startswith(f"the Ray cluster at {UNREACHABLE} cannot be reached"), locs
    # an endpoint's model is served elsewhere: nothing to shard (listed with the request's other problems)
    endpoint = {**ray, "model": "served", "backend": {"backend": "openai", "endpoint": "nope"}}
    locs = _locs(api.post("/evaluations", json=endpoint))
    assert "an endpoint's model" in locs["executor"] and "backend.endpoint" in locs
    assert _counts() == before


def test_an_evaluation_on_ray_runs_in_the_worker_and_scores_as_local(api, cluster_setting, ray_cluster, monkeypatch):
    import ray

    from training_platform.workers import eval_tasks

    cluster_setting(ray_cluster.address)
    written: list[dict] = []  # the workers' progress as the evaluation row holds it while the run goes on
    record = eval_service.record_worker_progress

    def spy(session, job_id, executor):
        written.append(executor)
        record(session, job_id, executor)

    monkeypatch.setattr(eval_service, "record_worker_progress", spy)
    monkeypatch.setattr(eval_tasks, "PROGRESS_WRITE_S", 0.0)
    ids = {}
    for executor in ("ray", "local"):
        body = {"model": "demo/model", "name": executor, **SMALL, "executor": executor}
        if executor == "ray":
            body["workers"] = 2
        created = api.post("/evaluations", json=body)
        assert created.status_code == 201, created.text
        ids[executor] = created.json()["id"]
    queued = api.get(f"/evaluations/{ids['ray']}").json()["executor"]
    assert queued == {"name": "ray", "workers": 2, "requested": "ray", "reason": "asked for", "progress": []}
    try:
        _run_queued_evaluations()
    finally:
        if ray.is_initialized():  # the executor disconnects itself; never leave this process joined
            ray.shutdown()

    ran = {name: api.get(f"/evaluations/{i}").json() for name, i in ids.items()}
    for name, evaluation in ran.items():
        assert evaluation["status"] == "succeeded", (name, evaluation["error"])
    on_ray = ran["ray"]
    assert on_ray["summary"]["executor"]["name"] == "ray" and on_ray["summary"]["executor"]["workers"] == 2
    assert len(on_ray["summary"]["executor"]["nodes"]) == 2
    assert "executor" not in ran["local"]["summary"] and ran["local"]["executor"]["workers"] == 1
    assert {"name": "executor", "ok": True, "detail": "ray (2 workers)"} in on_ray["preflight"]["checks"]
    # the job page's executor: each worker's final counts (4 items each: 2 of the 4 batches of 2)
    executor = on_ray["executor"]
    assert executor["name"] == "ray" and executor["workers"] == 2
    assert {(p["worker"], p["stage"]): (p["done"], p["total"]) for p in executor["progress"]} == {
        (w, stage): (4, 4) for w in (0, 1) for stage in ("generate", "score")
    }
    assert {p["benchmark"] for p in executor["progress"]} == {"gsm8k"}
    running = [w for w in written if w is not None]
    assert running and all(w["name"] == "ray" and w["workers"] == 2 for w in running)
    assert {p["worker"] for w in running for p in w["progress"]} == {0, 1}

    assert on_ray["metrics"] == ran["local"]["metrics"]
    keep = ("benchmark", "position", "item_id", "sample_index", "correct", "extracted", "reference", "output")
    samples = {
        name: [
            {k: s[k] for k in keep} for s in api.get(f"/evaluations/{i}/samples", params={"limit": 50}).json()["items"]
        ]
        for name, i in ids.items()
    }
    assert len(samples["ray"]) == 8 and samples["ray"] == samples["local"]

    # Auto-evaluation of checkpoints: a job trained on the cluster (launcher ray) is evaluated on it; others locally.
    fired = {}
    for launcher in ("ray", "local"):
        job_id = _training_job(api, {"launcher": launcher})
        schedule = api.post(
            "/schedules", json={"name": f"on {launcher}", "trigger": "on_new_checkpoint", "job_id": job_id, **SMALL}
        )
        assert schedule.status_code == 201, schedule.text
        run = api.post(f"/schedules/{schedule.json()['id']}/run")
        assert run.status_code == 201, run.text
        fired[launcher] = api.get(f"/evaluations/{run.json()['evaluation_id']}").json()["executor"]
        assert api.post(f"/jobs/{run.json()['evaluation_id']}/cancel").status_code == 200  # not run here
    assert fired["ray"]["name"] == "ray" and fired["ray"]["requested"] == "auto"
    assert fired["ray"]["reason"] == "auto: the checkpoint's training job ran on the Ray cluster"
    assert fired["local"]["name"] == "local" and "not more than 200000" in fired["local"]["reason"]


def test_cancelling_an_evaluation_on_ray_stops_its_workers_within_30_s(api, cluster_setting, ray_cluster, monkeypatch):
    """Cancelled while its two Ray workers generate: the evaluation ends cancelled and its actors and placement
    group are gone (the cluster's CPUs free) within 30 s of the cancel."""
    import threading
    import time

    import ray
    from ray_fixtures import CLUSTER_CPUS, free_cpus, wait_until

    from training_platform.workers import eval_tasks

    cluster_setting(ray_cluster.address)
    monkeypatch.setattr(eval_tasks, "PROGRESS_WRITE_S", 0.0)
    body = {
        "model": "demo/model",
        "name": "cancelled on ray",
        "benchmarks": [{**GSM8K, "limit": 40}],
        "generation": {"max_new_tokens": 32},
        "backend": {"num_threads": 1, "batch_size": 2},
        "executor": "ray",
        "workers": 2,
    }
    created = api.post("/evaluations", json=body)
    assert created.status_code == 201, created.text
    eval_id = created.json()["id"]
    cancelled_at: dict[str, float] = {}

    def cancel_when_under_way() -> None:  # the worker code runs in this test's main thread
        def under_way() -> bool:
            progress = (api.get(f"/evaluations/{eval_id}").json()["executor"] or {}).get("progress") or []
            return any(p["stage"] == "generate" and 0 < p["done"] < p["total"] for p in progress)

        wait_until(under_way, 180, "the Ray workers to be generating", interval=0.1)
        cancelled_at["t"] = time.monotonic()
        assert api.post(f"/jobs/{eval_id}/cancel").status_code == 200

    canceller = threading.Thread(target=cancel_when_under_way, daemon=True)
    canceller.start()
    try:
        _run_queued_evaluations()
    finally:
        if ray.is_initialized():
            ray.shutdown()
    canceller.join(timeout=5)
    assert "t" in cancelled_at, "the evaluation finished before it was seen under way"
    evaluation = api.get(f"/evaluations/{eval_id}").json()
    assert evaluation["status"] == "cancelled", evaluation["error"]
    wait_until(lambda: free_cpus(ray_cluster.address) == CLUSTER_CPUS, 30, "the cluster's CPUs to free", 0.5)
    elapsed = time.monotonic() - cancelled_at["t"]
    assert elapsed < 30, f"the Ray workers stopped {elapsed:.1f} s after the cancel"


# ---------------------------------------------------------------------------------------------- the choice


def test_auto_chooses_ray_for_a_cluster_and_many_items_or_a_job_trained_on_it():
    choose = eval_service.choose_executor
    common = {"min_rows": 100}
    assert choose("auto", ray_address=None, items=10**6, launcher="ray", **common)[0] == "local"
    assert choose("auto", ray_address="h:6379", items=100, **common)[0] == "local"
    assert choose("auto", ray_address="h:6379", items=101, **common)[0] == "ray"
    assert choose("auto", ray_address="h:6379", items=1, launcher="ray", **common)[0] == "ray"
    assert choose("auto", ray_address="h:6379", items=1, launcher="torchrun", **common)[0] == "local"
    assert choose("auto", ray_address="h:6379", items=10**6, openai=True, **common)[0] == "local"
    assert choose("local", ray_address="h:6379", items=10**6, launcher="ray", **common) == ("local", "asked for")
    assert choose("ray", ray_address=None, items=1, **common) == ("ray", "asked for")  # refused by the caller

    def launcher(resources: dict, kind: str = "train") -> str | None:
        return eval_service.job_launcher(Job(owner_id=1, name="j", kind=kind, config={"resources": resources}))

    assert launcher({"launcher": "ray"}) == "ray"
    assert launcher({"num_nodes": 2}) == "ray"  # auto across nodes
    assert launcher({"num_devices": 2}) == "torchrun" and launcher({}) == "local"
    assert launcher({"launcher": "ray"}, kind="eval") is None and eval_service.job_launcher(None) is None


def test_a_firing_falls_back_to_local_when_the_cluster_it_chose_does_not_answer(monkeypatch):
    from training_platform.core.settings import Settings
    from training_platform.evaluation.config import EvalConfig
    from training_platform.evaluation.request import EvalRequest

    monkeypatch.setenv("TP_RAY_ADDRESS", UNREACHABLE)
    settings = Settings()
    config = EvalConfig.model_validate({"model": {"path": "m"}, "benchmarks": [{"name": "humaneval"}]})
    request = EvalRequest.model_validate({"benchmarks": ["humaneval"], "workers": 4})
    choice, errors = eval_service.resolve_executor(request, config, settings, launcher="ray", fall_back=True)
    assert errors == [] and choice is not None
    assert choice.name == "local" and choice.workers is None and choice.requested == "auto"
    assert "ran on the Ray cluster, but the Ray cluster at 127.0.0.1:9 cannot be reached" in choice.reason
    # a submission is answered instead: refused, naming the executor
    choice, errors = eval_service.resolve_executor(request, config, settings, launcher="ray")
    assert choice is None and [loc for loc, _ in errors] == ["executor"]
    # humaneval's 164 bundled items are counted (and `limit` caps them)
    assert eval_service.count_items(config, stop_after=10**6) == 164
    assert eval_service.count_items(config, stop_after=10) == 11
    limited = EvalConfig.model_validate({"model": {"path": "m"}, "benchmarks": [{"name": "humaneval", "limit": 3}]})
    assert eval_service.count_items(limited, stop_after=10**6) == 3

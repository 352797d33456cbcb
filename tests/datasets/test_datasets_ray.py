"""Dataset operations with `executor` over the API: `ray` runs a real worker's operation as Ray Data stages on the
session's 2-node Ray cluster (TP_RAY_ADDRESS) and stores the same version as a local run; `auto` picks local for a
small version; a `ray` the platform cannot honour is refused at submit naming `executor`."""

from __future__ import annotations

import os
import re

import pytest
from ds_helpers import api_context, chat, follow, jsonl, start_worker, upload, wait_job
from ray_fixtures import CLUSTER_CPUS, free_cpus

from training_platform.core.settings import Settings
from training_platform.data.operations import Operation, OperationParams, register_operation, unregister_operation
from training_platform.services import dataset_operations

pytestmark = pytest.mark.integration

RECIPE = {"operators": [{"op": "normalize_whitespace"}, {"op": "length_filter", "unit": "words", "min": 3}]}
LOCAL_ONLY = "local_only_test"


class _LocalOnlyParams(OperationParams):
    pass


class _LocalOnly(Operation[_LocalOnlyParams]):
    """An operation that runs locally only (the default `executors`): every built-in one also runs on Ray."""


@pytest.fixture
def local_only():
    register_operation(LOCAL_ONLY, _LocalOnlyParams)(_LocalOnly)
    try:
        yield LOCAL_ONLY
    finally:
        unregister_operation(LOCAL_ONLY)


def test_the_executor_is_resolved_at_submit(local_only):
    resolve = dataset_operations.resolve_executor
    none = Settings(ray_address=None)
    assert resolve("clean", "auto", 10**9, none) == "local"
    assert resolve("clean", "local", 10, Settings(ray_address="127.0.0.1:9")) == "local"
    cases = [
        ("clean", none, "ray needs a Ray cluster and the platform has none (TP_RAY_ADDRESS)"),
        ("clean", Settings(ray_address="127.0.0.1:9"), "the Ray cluster at 127.0.0.1:9 cannot be reached"),
        (
            local_only,
            Settings(ray_address="127.0.0.1:9"),
            f"{local_only} runs locally only; on ray: clean, dedup, convert",
        ),
    ]
    for operation, settings, reason in cases:
        with pytest.raises(dataset_operations.OperationInvalid) as refused:
            resolve(operation, "ray", 10, settings)
        assert refused.value.errors[0][0] == "executor" and refused.value.errors[0][1].startswith(reason)
    # auto with an unreachable cluster, or a small input: local
    assert resolve("clean", "auto", 10**9, Settings(ray_address="127.0.0.1:9")) == "local"
    assert resolve("dedup", "auto", 5, Settings(ray_address="127.0.0.1:9", ray_min_rows=0)) == "local"


@pytest.fixture(scope="module")
def platform(ray_cluster, data_dir, redis_client, tmp_path_factory):
    old = os.environ.get("TP_RAY_ADDRESS")
    os.environ["TP_RAY_ADDRESS"] = ray_cluster.address
    try:
        with api_context(data_dir, "sqlite", tmp_path_factory.mktemp("ds_ray")) as api:
            worker = start_worker(data_dir, "ds-ray")
            try:
                yield api, worker
            finally:
                worker.stop()
    finally:
        if old is None:
            os.environ.pop("TP_RAY_ADDRESS", None)
        else:
            os.environ["TP_RAY_ADDRESS"] = old


def _operate(api, version: dict, operation: str, params: dict, executor: str):
    return api.post(
        f"/datasets/{version['dataset_id']}/versions/{version['id']}/operations",
        json={"operation": operation, "params": params, "executor": executor},
    )


def test_operations_on_ray_store_the_local_version(platform, local_only):
    api, worker = platform
    rows = [chat(f"What   is {i} plus {i + 1}?", f"It is {2 * i + 1}.") for i in range(300)]
    rows += [chat("hi", "ok")] * 20 + rows[:40]
    uploaded = upload(api, "on-ray", jsonl(rows)).json()["version"]
    results = {}
    for executor in ("local", "ray"):
        for operation, params in (("clean", {"recipe": RECIPE}), ("dedup", {"num_perm": 32})):
            r = _operate(api, uploaded, operation, params, executor)
            assert r.status_code == 202, r.text
            done = wait_job(api, r.json()["id"], timeout=180, worker=worker)
            assert done["status"] == "succeeded", (done["error"], worker.log()[-3000:])
            job = api.get(f"/jobs/{done['id']}").json()
            assert job["config"]["executor"] == executor
            # the version the job stored, or found already stored (the store is content-addressed)
            reason = api.get(f"/jobs/{done['id']}/events").json()[-1]["reason"]
            version_id = int(re.search(r"-> (?:identical to the existing )?version (\d+)", reason).group(1))
            version = api.get(f"/datasets/{uploaded['dataset_id']}/versions/{version_id}").json()
            results[(executor, operation)] = (version["sha256"], version["rows"], job)
    for operation in ("clean", "dedup"):
        assert results[("ray", operation)][:2] == results[("local", operation)][:2], operation
        progress = results[("ray", operation)][2]["config"].get("ray_progress")
        if operation == "clean":  # blocks done, per Ray worker process
            assert progress["executor"] == "ray" and progress["done"] == progress["total"] >= 1, progress
            assert sum(progress["workers"].values()) == progress["done"]
    assert results[("local", "clean")][1] == 300 + 40  # the short rows went
    assert results[("local", "dedup")][1] == 301  # 300 distinct + one "hi"

    refused = _operate(api, uploaded, local_only, {}, "ray")
    assert refused.status_code == 422
    assert refused.json()["detail"][0]["loc"] == "executor", refused.json()
    auto = _operate(api, uploaded, "clean", {"recipe": RECIPE}, "auto")
    assert auto.status_code == 202 and api.get(f"/jobs/{auto.json()['id']}").json()["config"]["executor"] == "local"
    wait_job(api, auto.json()["id"], timeout=120, worker=worker)


def test_cancelling_an_operation_on_ray_stops_its_tasks_within_30_s(platform, ray_cluster):
    """A clean on Ray cancelled while its blocks run: the job is cancelled, the driver process gone and the
    cluster's CPUs free again within 30 s of the cancel; nothing is stored."""
    import time

    import psutil
    from _wk import wait_for

    api, worker = platform
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "mu"]
    questions = (" ".join(words[(i + k) % 12] for k in range(12)) + f" {i}?" for i in range(60_000))
    rows = [chat(question, "Answered.") for question in questions]
    src = api.data_dir / "users" / "alice" / "incoming" / "many.jsonl"  # over the test API's upload cap: registered
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_bytes(jsonl(rows))
    registered = api.post(
        "/datasets/register", json={"name": "cancel-on-ray", "path": "users/alice/incoming/many.jsonl"}
    )
    uploaded = follow(api, registered).json()["version"]
    versions_before = len(api.get(f"/datasets/{uploaded['dataset_id']}/versions").json()["items"])
    r = _operate(api, uploaded, "clean", {"recipe": RECIPE}, "ray")
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]

    def mid_run():
        job = api.get(f"/jobs/{job_id}").json()
        assert job["status"] not in ("succeeded", "failed", "cancelled"), (job, worker.log()[-3000:])
        progress = job["config"].get("ray_progress") or {}
        return job if 1 <= progress.get("done", 0) < progress.get("total", 0) else None

    wait_for(mid_run, 180, interval=0.2, what="the operation's Ray blocks to be under way")
    drivers = [
        p
        for p in psutil.process_iter(["cmdline"])
        if "training_platform.workers.ray_data_driver" in " ".join(p.info["cmdline"] or [])
    ]
    assert drivers, "the operation runs in its own Ray driver process"
    cancelled_at = time.monotonic()
    assert api.post(f"/jobs/{job_id}/cancel").status_code == 200
    done = wait_job(api, job_id, timeout=30, worker=worker)
    assert done["status"] == "cancelled", done
    wait_for(lambda: not any(p.is_running() for p in drivers), 30, interval=0.2, what="the Ray driver to exit")
    wait_for(lambda: free_cpus(ray_cluster.address) == CLUSTER_CPUS, 30, interval=0.5, what="the CPUs to free")
    elapsed = time.monotonic() - cancelled_at
    assert elapsed < 30, f"the Ray tasks stopped {elapsed:.1f} s after the cancel"
    assert len(api.get(f"/datasets/{uploaded['dataset_id']}/versions").json()["items"]) == versions_before

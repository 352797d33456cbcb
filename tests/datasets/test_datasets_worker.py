"""Datasets end to end through a real worker (`tp worker --queues train,data`, real Redis, SQLite and PostgreSQL):
upload -> clean (data job) -> dedup (data job) with a queryable lineage, the row preview of the result, a failing
operation that stores nothing, and the training manifest <-> dataset version link with DELETE guarded by it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ds_helpers import api_context, chat, jsonl, sha256, start_worker, tmp_files, upload, wait_job

pytestmark = pytest.mark.integration

RECIPE = {
    "name": "basic",
    "operators": [
        {"op": "strip_html"},
        {"op": "normalize_whitespace"},
        {"op": "length_filter", "unit": "words", "min": 3},
    ],
}


def dirty_rows() -> list[dict]:
    rows = [chat(f"<p>What is <b>{i}</b> plus {i + 1}?</p>", f"The   answer is {2 * i + 1}.") for i in range(10)]
    rows += [chat("hi", "ok")] * 2  # too short: the clean removes them
    rows += [chat("<p>What is <b>3</b> plus 4?</p>", "The   answer is 7.")] * 2  # exact duplicates once cleaned
    rows += [chat("What is 5 plus 6 ?", "The answer is 11.")]  # a near duplicate of row 5
    rows += [
        chat(
            "Explain photosynthesis to a child in simple words please",
            "Plants use sunlight to make food from air and water.",
        )
    ]
    return rows


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def platform(request, data_dir, redis_client, tmp_path_factory):
    """The API (TestClient) and one real worker consuming train and data, on one database."""
    with api_context(data_dir, request.param, tmp_path_factory.mktemp(f"ds_e2e_{request.param}")) as api:
        worker = start_worker(data_dir, f"ds-{request.param}")
        try:
            yield api, worker, request.param
        finally:
            worker.stop()


def _operate(api, version: dict, operation: str, params: dict) -> dict:
    r = api.post(
        f"/datasets/{version['dataset_id']}/versions/{version['id']}/operations",
        json={"operation": operation, "params": params},
    )
    assert r.status_code == 202, r.text
    assert r.json()["warning"] is None
    return r.json()


def _output_version(api, dataset_id: int, job_id: int) -> dict:
    items = api.get(f"/datasets/{dataset_id}/versions", params={"job_id": job_id}).json()["items"]
    assert len(items) == 1, items
    return api.get(f"/datasets/{dataset_id}/versions/{items[0]['id']}").json()


def test_upload_clean_dedup_lineage_and_preview(platform):
    api, worker, _ = platform
    content = jsonl(dirty_rows())
    uploaded = upload(api, "factory", content).json()["version"]
    assert uploaded["sha256"] == sha256(content) and uploaded["rows"] == 16

    job = _operate(api, uploaded, "clean", {"recipe": RECIPE})
    done = wait_job(api, job["id"], worker=worker)
    assert done["status"] == "succeeded", done
    assert done["kind"] == "data" and done["current_step"] == 100 and done["error"] is None
    assert done["worker"] and done["preflight"]["ok"] is True
    events = api.get(f"/jobs/{job['id']}/events").json()
    assert [e["to_status"] for e in events] == ["queued", "preflight", "running", "succeeded"]
    cleaned = _output_version(api, uploaded["dataset_id"], job["id"])
    assert events[-1]["reason"].startswith(f"clean -> version {cleaned['id']}")
    assert cleaned["operation"] == "clean" and cleaned["parent_version_id"] == uploaded["id"]
    assert cleaned["job_id"] == job["id"] and cleaned["rows"] == 14 and cleaned["format"] == "messages"
    assert [op["op"] for op in cleaned["recipe"]["recipe"]["operators"]] == [
        "strip_html",
        "normalize_whitespace",
        "length_filter",
    ]
    assert cleaned["recipe"]["recipe"]["operators"][2]["min"] == 3
    assert [(op["op"], op["removed"]) for op in cleaned["report"]["operators"]][2] == ("length_filter", 2)
    assert cleaned["stats"] == {"input_rows": 16, "output_rows": 14, "removed_rows": 2}
    stored = api.data_dir / cleaned["path"]
    assert sha256(stored.read_bytes()) == cleaned["sha256"] and "<b>" not in stored.read_text()

    job2 = _operate(api, cleaned, "dedup", {"threshold": 0.7, "ngram": 2})
    done2 = wait_job(api, job2["id"], worker=worker)
    assert done2["status"] == "succeeded", done2
    deduped = _output_version(api, uploaded["dataset_id"], job2["id"])
    assert deduped["rows"] == 11 and deduped["parent_version_id"] == cleaned["id"]
    assert deduped["stats"]["exact_duplicates"] == 2 and deduped["stats"]["near_duplicates"] == 1
    assert deduped["report"]["clusters"] == [[3, 10, 11], [5, 12]]
    assert deduped["recipe"]["threshold"] == 0.7 and deduped["recipe"]["num_perm"] == 128  # defaults recorded

    # The lineage: dedup <- clean <- upload, each with its operation and recipe.
    lineage = deduped["lineage"]
    assert [(a["id"], a["operation"]) for a in lineage] == [(cleaned["id"], "clean"), (uploaded["id"], "upload")]
    assert lineage[0]["recipe"]["recipe"]["name"] == "basic" and lineage[0]["job_id"] == job["id"]
    assert lineage[1]["recipe"]["filename"] == "data.jsonl" and lineage[1]["parent_version_id"] is None
    dataset = api.get(f"/datasets/{uploaded['dataset_id']}").json()
    assert dataset["current_version_id"] == deduped["id"] and dataset["version_count"] == 3

    # Preview of the result.
    rows_url = f"/datasets/{deduped['dataset_id']}/versions/{deduped['id']}/rows"
    page = api.get(rows_url, params={"limit": 5}).json()
    assert page["total"] == 11 and [i["index"] for i in page["items"]] == [0, 1, 2, 3, 4]
    assert page["items"][0]["row"] == chat("What is 0 plus 1?", "The answer is 1.")
    hits = api.get(rows_url, params={"q": "PHOTOSYNTHESIS"}).json()
    assert hits["total"] == 1 and hits["items"][0]["index"] == 10
    assert tmp_files(api.data_dir) == []

    # The data jobs are ordinary jobs in the listing.
    listed = {j["id"]: j for j in api.get("/jobs", params={"status": "succeeded"}).json()["items"]}
    assert listed[job["id"]]["algorithm"] == "clean" and listed[job2["id"]]["algorithm"] == "dedup"

    # Finished data jobs do not hold the dataset; a job config naming a version file does (whatever its status).
    from api_helpers import valid_config
    from sqlmodel import select

    from training_platform.db import crud
    from training_platform.db.models import User
    from training_platform.db.session import session_scope

    with session_scope() as s:  # stored without a wake-up: it stays queued (no beat in this test)
        owner = s.exec(select(User).where(User.name == "alice")).one()
        holder = crud.create_job(
            s, owner=owner, name="holder", config=valid_config(data={"train_file": cleaned["path"], "max_length": 64})
        ).id
    r = api.delete(f"/datasets/{uploaded['dataset_id']}")
    assert r.status_code == 409 and f"job {holder} references version {cleaned['id']}" in r.json()["detail"]
    assert api.post(f"/jobs/{holder}/cancel").json()["status"] == "cancelled"
    assert api.delete(f"/datasets/{uploaded['dataset_id']}").status_code == 409
    assert api.delete(f"/jobs/{holder}").status_code == 204
    assert api.delete(f"/datasets/{uploaded['dataset_id']}").status_code == 204
    assert not (api.data_dir / deduped["path"]).exists() and not (api.data_dir / uploaded["path"]).exists()
    assert api.get(f"/jobs/{job2['id']}").json()["status"] == "succeeded"  # the jobs stay, as history


def test_a_failing_operation_fails_the_job_and_stores_nothing(platform):
    api, worker, _ = platform
    rows = [
        chat("What is 1 plus 1?", "2"),
        {
            "messages": [
                {"role": "user", "content": "a"},
                {"role": "assistant", "content": "b"},
                {"role": "user", "content": "c"},
                {"role": "assistant", "content": "d"},
            ]
        },
    ]
    version = upload(api, "multi-turn", jsonl(rows)).json()["version"]
    job = _operate(api, version, "convert", {"to": "alpaca"})  # alpaca holds one turn: row 2 cannot convert
    done = wait_job(api, job["id"], worker=worker)
    assert done["status"] == "failed", done
    assert done["error"].startswith("convert failed: DatasetError: line 2: messages: alpaca holds one user turn")
    versions = api.get(f"/datasets/{version['dataset_id']}/versions").json()
    assert versions["total"] == 1
    assert tmp_files(api.data_dir) == []

    # A version file changed behind the platform's back: the job's preflight refuses it.
    tampered = api.data_dir / version["path"]
    tampered.chmod(0o644)
    tampered.write_bytes(tampered.read_bytes() + jsonl([chat("sneaked in", "row")]))
    done = wait_job(api, _operate(api, version, "dedup", {})["id"], worker=worker)
    assert done["status"] == "failed" and done["preflight"]["ok"] is False
    assert done["error"].startswith(
        f"preflight failed: version_id: the file of version {version['id']} was modified: sha256 "
    )
    assert api.get(f"/datasets/{version['dataset_id']}/versions").json()["total"] == 1

    # The same operation on a version it suits: converted, format recorded.
    good = upload(api, "single-turn", jsonl(rows[:1])).json()["version"]
    done = wait_job(api, _operate(api, good, "convert", {"to": "alpaca"})["id"], worker=worker)
    assert done["status"] == "succeeded", done
    converted = _output_version(api, good["dataset_id"], done["id"])
    assert converted["format"] == "alpaca" and converted["stats"]["target_format"] == "alpaca"
    rows_out = api.get(f"/datasets/{good['dataset_id']}/versions/{converted['id']}/rows").json()["items"]
    assert rows_out[0]["row"] == {"instruction": "What is 1 plus 1?", "input": "", "output": "2"}


@pytest.mark.parametrize("platform", ["sqlite"], indirect=True)  # one training run is enough
def test_training_manifest_links_the_dataset_version_and_guards_delete(platform):
    api, worker, db = platform
    from api_helpers import valid_config

    content = (api.data_dir / "demo" / "data" / "sft.jsonl").read_bytes()
    version = upload(api, "sft-data", content).json()["version"]
    config = valid_config(
        data={"train_file": version["path"], "max_length": 64},
        training={"max_steps": 3, "per_device_batch_size": 4, "logging_steps": 1},
    )
    r = api.post("/jobs", json={"name": "train-on-version", "config": config})
    assert r.status_code == 201, r.text
    job = wait_job(api, r.json()["id"], timeout=150, worker=worker)
    assert job["status"] == "succeeded", job

    manifest = [json.loads(line) for line in (Path(job["run_dir"]) / "manifest.jsonl").read_text().splitlines()]
    datasets = [e for e in manifest if e["kind"] == "dataset" and e.get("field") == "data.train_file"]
    assert datasets and datasets[0]["sha256"] == version["sha256"]
    assert Path(datasets[0]["path"]) == api.data_dir / version["path"]

    dataset_id = version["dataset_id"]
    r = api.delete(f"/datasets/{dataset_id}")
    assert r.status_code == 409 and f"job {job['id']} references version {version['id']}" in r.json()["detail"]
    assert api.delete(f"/jobs/{job['id']}").status_code == 204
    assert api.delete(f"/datasets/{dataset_id}").status_code == 204
    assert not (api.data_dir / version["path"]).exists()

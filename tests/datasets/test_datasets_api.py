"""Datasets over the API without a worker: upload (streamed, size limit, reject/quarantine), register, versions,
row preview, stats, operation validation and queued data jobs, delete."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ds_helpers import (
    chat,
    follow,
    jsonl,
    run_data_job,
    sha256,
    staged_files,
    store_files,
    tmp_files,
    upload,
    upload_only,
)

pytestmark = pytest.mark.integration

GOOD = [chat(f"What is {i} + {i}?", f"{2 * i}") for i in range(12)]
BAD_ROWS = [
    chat("fine", "ok"),
    {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]},
    {"messages": [{"role": "robot", "content": "x"}, {"role": "assistant", "content": "y"}]},  # line 3
    chat("also fine", "yes"),
    {"messages": [{"role": "user", "content": "no reply"}]},  # line 5
    "this line is not json",  # line 6
]


def dataset_count(api) -> int:
    return api.get("/datasets", user="root").json()["total"]


# ---------------------------------------------------------------------------------------------- upload


def test_upload_creates_a_content_addressed_version(api):
    content = jsonl(GOOD)
    r = upload(api, "arith", content, description="addition")
    # The API answered 202 at once: the dataset, and the ingest data job that validated and stored the file.
    accepted = r.accepted.json()
    assert r.accepted.status_code == 202 and accepted["staged_bytes"] == len(content)
    assert accepted["dataset"]["name"] == "arith" and accepted["dataset"]["current_version_id"] is None
    assert accepted["job"]["kind"] == "data" and accepted["job"]["algorithm"] == "ingest"
    assert accepted["job"]["status"] == "queued" and accepted["job"]["config"]["policy"] == "reject"
    assert r.job["status"] == "succeeded" and r.job["current_step"] == 100
    assert r.status_code == 201, r.text
    body = r.json()
    version, dataset = body["version"], body["dataset"]
    assert body["created"] is True
    assert version["sha256"] == sha256(content)
    assert version["rows"] == 12 and version["format"] == "messages" and version["size_bytes"] == len(content)
    assert version["schema"] == {"messages": "array"}
    assert version["operation"] == "upload" and version["parent_version_id"] is None and version["lineage"] == []
    assert version["recipe"] == {"filename": "data.jsonl", "policy": "reject", "format": "auto"}
    assert version["path"] == f"datasets/{version['sha256'][:2]}/{version['sha256']}.jsonl"
    stored = api.data_dir / version["path"]
    assert stored.read_bytes() == content  # byte for byte
    assert not stored.stat().st_mode & 0o222  # read-only: versions are immutable
    assert dataset["name"] == "arith" and dataset["owner"] == "alice" and dataset["description"] == "addition"
    assert dataset["current_version_id"] == version["id"] and dataset["version_count"] == 1
    assert dataset["id"] == accepted["dataset"]["id"] and version["job_id"] == r.job["id"]
    assert r.job["config"]["result"] == {
        "accepted": True,
        "dataset_id": dataset["id"],
        "version_id": version["id"],
        "created": True,
        "sha256": sha256(content),
        "rows": 12,
        "uploaded_rows": 12,
        "bad_rows": 0,
        "quarantine": None,
    }
    assert version["report"]["rows"] == 12 and version["report"]["bad_row_count"] == 0
    assert tmp_files(api.data_dir) == [] and staged_files(api.data_dir) == []

    # The same content again: the existing version (200), nothing new stored.
    again = upload(api, "arith", content)
    assert again.status_code == 200, again.text
    assert again.json()["created"] is False and again.json()["version"]["id"] == version["id"]
    assert api.get(f"/datasets/{dataset['id']}/versions").json()["total"] == 1

    # New content under the same name: a second version of the same dataset.
    more = upload(api, "arith", jsonl(GOOD[:5]))
    assert more.status_code == 201 and more.json()["dataset"]["id"] == dataset["id"]
    assert more.json()["dataset"]["current_version_id"] == more.json()["version"]["id"]
    listing = api.get(f"/datasets/{dataset['id']}/versions").json()
    assert [v["rows"] for v in listing["items"]] == [12, 5] and listing["total"] == 2

    # Visibility: others get 404; admins see everything.
    assert api.get(f"/datasets/{dataset['id']}", user="bob").status_code == 404
    assert api.get(f"/datasets/{dataset['id']}/versions/{version['id']}/rows", user="bob").status_code == 404
    assert api.get("/datasets", user="bob").json()["total"] == 0
    listed = {d["id"]: d for d in api.get("/datasets", user="root").json()["items"]}
    assert listed[dataset["id"]]["version_count"] == 2 and listed[dataset["id"]]["owner"] == "alice"
    assert api.get("/datasets", user="root", params={"owner": "bob"}).json()["total"] == 0
    detail = api.get(f"/datasets/{dataset['id']}/versions/{version['id']}").json()
    assert detail["sha256"] == version["sha256"] and detail["audit_cached"] is True  # computed by the worker


def test_reject_policy_refuses_the_whole_upload_and_stores_nothing(api):
    before_files, before_count = store_files(api.data_dir), dataset_count(api)
    r = upload(api, "dirty", jsonl(BAD_ROWS))
    assert r.status_code == 422, r.text
    body = r.json()
    locs = [d["loc"] for d in body["detail"]]
    assert locs[:3] == ["line 3: messages[0].role", "line 5: messages", "line 6: <row>"]
    assert "robot" in body["detail"][0]["msg"] and "invalid JSON" in body["detail"][2]["msg"]
    assert body["rows"] == 6 and body["bad_rows"] == 3 and body["stored"] is False
    # Nothing stored: no dataset row, no file (content, quarantine or temp).
    assert dataset_count(api) == before_count
    assert api.get("/datasets", params={"q": "dirty"}).json()["total"] == 0
    assert store_files(api.data_dir) == before_files


def test_reject_lists_the_first_problems_and_the_total(api):
    rows = [chat("ok", "fine")] + [{"messages": [{"role": "robot", "content": "x"}]}] * 80
    r = upload(api, "many-bad", jsonl(rows))
    assert r.status_code == 422
    detail = r.json()["detail"]
    assert len(detail) == 51 and detail[0]["loc"].startswith("line 2: ")
    assert detail[-1] == {"loc": "<file>", "msg": "80 bad rows in all (the first are listed)"}
    assert r.json()["bad_rows"] == 80


def test_quarantine_policy_keeps_good_rows_and_lists_bad_ones(api):
    r = upload(api, "quarantined", jsonl(BAD_ROWS), policy="quarantine")
    assert r.status_code == 201, r.text
    version = r.json()["version"]
    stored = api.data_dir / version["path"]
    assert version["rows"] == 3 and version["sha256"] == sha256(stored.read_bytes())
    assert [json.loads(line) for line in stored.read_text().splitlines()] == [BAD_ROWS[0], BAD_ROWS[1], BAD_ROWS[3]]
    report = version["report"]
    assert report["policy"] == "quarantine" and report["quarantined_rows"] == 3
    assert [b["line"] for b in report["bad_rows"]] == [3, 5, 6]
    assert report["bad_rows"][0]["errors"][0]["field"] == "messages[0].role"
    quarantine = api.data_dir / report["quarantine"]
    entries = [json.loads(line) for line in quarantine.read_text().splitlines()]
    assert [e["line"] for e in entries] == [3, 5, 6]
    assert entries[0]["row"] == BAD_ROWS[2] and entries[2]["raw"] == "this line is not json"
    assert version["stats"] == {"uploaded_rows": 6, "valid_rows": 3, "quarantined_rows": 3}
    assert report["uploaded_sha256"] == sha256(jsonl(BAD_ROWS))
    assert tmp_files(api.data_dir) == []

    all_bad = upload(api, "all-bad", jsonl(BAD_ROWS[2:3] * 3), policy="quarantine")
    assert all_bad.status_code == 422 and "all 3 rows are invalid" in all_bad.json()["detail"][0]["msg"]


def test_too_large_uploads_get_413_and_leave_nothing(api):
    big = jsonl([chat("x" * 1000, "y" * 1000)] * 600)  # ~1.2 MB > TP_MAX_UPLOAD_MB=1
    before_files, before_count = store_files(api.data_dir), dataset_count(api)
    r = upload(api, "big", big)
    assert r.status_code == 413, r.text
    assert "TP_MAX_UPLOAD_MB" in r.json()["detail"]

    # Without a Content-Length (chunked): refused while streaming, the partial temp file removed.
    boundary = "tpboundary"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="name"\r\n\r\nbig\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.jsonl"\r\n'
        f"Content-Type: application/octet-stream\r\n\r\n"
    ).encode()

    def chunks():
        yield head
        for start in range(0, len(big), 65536):
            yield big[start : start + 65536]
        yield f"\r\n--{boundary}--\r\n".encode()

    r = api.post("/datasets", content=chunks(), headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    assert r.status_code == 413, r.text
    assert dataset_count(api) == before_count
    assert store_files(api.data_dir) == before_files

    # Just under the limit is fine, and a hand-made (chunked) multipart body parses.
    small = jsonl(GOOD)

    def small_chunks():
        body = head + small + f"\r\n--{boundary}--\r\n".encode()
        for i in range(0, len(body), 7):  # boundaries split across chunks
            yield body[i : i + 7]

    r = follow(
        api,
        api.post(
            "/datasets", content=small_chunks(), headers={"Content-Type": f"multipart/form-data; boundary={boundary}"}
        ),
    )
    assert r.status_code in (200, 201), r.text
    assert r.json()["version"]["sha256"] == sha256(small)


def test_upload_form_errors(api):
    assert api.post("/datasets", json={"name": "x"}).status_code == 415
    r = api.post("/datasets", data={"name": "nofile"})
    assert r.status_code in (415, 422)
    r = api.post("/datasets", files={"other": ("x.txt", b"hi")}, data={"name": "x"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == "other"
    r = upload(api, "bad name!", jsonl(GOOD))
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == "name"
    r = upload(api, "x", jsonl(GOOD), policy="maybe", format="nope")
    assert {d["loc"] for d in r.json()["detail"]} == {"policy", "format"}
    r = upload(api, "x", b"hello", filename="notes.txt")
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == "file" and ".txt" in r.json()["detail"][0]["msg"]
    r = upload(api, "binary", b'{"text": "caf\xe9"}\n\xff\xfe\n')
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == "<file>" and r.json()["stored"] is False
    r = upload(api, "empty", b"")
    assert r.status_code == 422 and "no rows" in r.json()["detail"][0]["msg"]
    r = api.client.post("/api/v1/datasets", files={"file": ("a.jsonl", jsonl(GOOD))}, data={"name": "anon"})
    assert r.status_code == 401
    assert tmp_files(api.data_dir) == []


def test_format_given_and_other_file_types(api):
    csv = b"prompt,completion\nWhat is 1+1?,2\nWhat is 2+2?,4\n"
    r = upload(api, "csv-set", csv, filename="pc.csv")
    assert r.status_code == 201, r.text
    v = r.json()["version"]
    assert v["format"] == "prompt_completion" and v["rows"] == 2 and v["path"].endswith(".csv")
    assert v["sha256"] == sha256(csv)
    r = upload(api, "as-text", jsonl([{"text": "a b c"}, {"text": "d e f"}]), format="text")
    assert r.status_code == 201 and r.json()["version"]["format"] == "text"
    from training_platform.data.io import write_rows

    parquet = api.data_dir / "rows.parquet"
    write_rows(parquet, GOOD[:3] + [{"messages": [{"role": "user", "content": "no reply"}]}])
    r = upload(api, "pq", parquet.read_bytes(), filename="rows.parquet", policy="quarantine")
    assert r.status_code == 201, r.text
    v = r.json()["version"]
    assert v["path"].endswith(".parquet") and v["rows"] == 3 and v["report"]["bad_rows"][0]["line"] == 4
    rows = api.get(f"/datasets/{v['dataset_id']}/versions/{v['id']}/rows").json()["items"]
    assert [i["row"] for i in rows] == GOOD[:3]
    r = upload(api, "wrong-format", jsonl(GOOD[:2]), format="preference")
    assert r.status_code == 422 and r.json()["detail"][0]["loc"].startswith("line 1: ")


# ---------------------------------------------------------------------------------------------- register


def test_register_a_server_side_file(api, outside_dir):
    src = api.data_dir / "users" / "alice" / "incoming" / "set.jsonl"  # alice's own area
    src.parent.mkdir(parents=True, exist_ok=True)
    content = jsonl(GOOD[:4])
    src.write_bytes(content)
    r = follow(
        api, api.post("/datasets/register", json={"name": "registered", "path": "users/alice/incoming/set.jsonl"})
    )
    assert r.accepted.status_code == 202 and r.status_code == 201, r.text
    v = r.json()["version"]
    assert v["operation"] == "register" and v["sha256"] == sha256(content) and v["rows"] == 4
    assert v["recipe"]["source"] == v["recipe"]["resolved"] == "users/alice/incoming/set.jsonl"
    stored = api.data_dir / v["path"]
    assert stored != src and stored.read_bytes() == content  # copied into the store
    src.write_bytes(jsonl(GOOD[:1]))  # the original changes; the version does not
    assert stored.read_bytes() == content
    assert (
        follow(api, api.post("/datasets/register", json={"name": "registered", "path": str(stored)})).status_code == 200
    )

    outside = outside_dir / "set.jsonl"
    outside.write_bytes(content)
    for path in (str(outside), "escape/passwd", "../../etc/passwd"):
        r = api.post("/datasets/register", json={"name": "nope", "path": path})
        assert r.status_code == 422, (path, r.text)
        assert (
            r.json()["detail"][0]["loc"] == "path" and "outside the allowed directories" in r.json()["detail"][0]["msg"]
        )
    r = api.post("/datasets/register", json={"name": "nope", "path": "users/alice/incoming/missing.jsonl"})
    assert r.status_code == 422 and "no such file" in r.json()["detail"][0]["msg"]
    r = api.post(
        "/datasets/register", json={"name": "nope", "path": "users/alice/incoming/set.jsonl", "policy": "maybe"}
    )
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == "policy"
    assert api.get("/datasets", params={"q": "nope"}).json()["total"] == 0


# ---------------------------------------------------------------------------------------------- rows & stats


def test_rows_preview_pagination_and_search(api):
    rows = [chat(f"Question {i}: what is {i} times 3?", f"{3 * i}") for i in range(120)]
    rows[7] = chat("Tell me about the BANANA", "It is yellow")
    rows[99] = chat("banana bread?", "Sure")
    v = upload(api, "preview", jsonl(rows)).json()["version"]
    base = f"/datasets/{v['dataset_id']}/versions/{v['id']}/rows"

    page = api.get(base).json()
    assert page["total"] == 120 and page["limit"] == 50 and page["offset"] == 0 and len(page["items"]) == 50
    assert page["items"][0] == {"index": 0, "line": 1, "row": rows[0]}
    page = api.get(base, params={"offset": 110, "limit": 20}).json()
    assert [i["index"] for i in page["items"]] == list(range(110, 120))
    assert api.get(base, params={"offset": 500}).json()["items"] == []

    found = api.get(base, params={"q": "banana"}).json()
    assert found["total"] == 2 and [i["index"] for i in found["items"]] == [7, 99]
    assert found["items"][0]["row"] == rows[7]
    found = api.get(base, params={"q": "what is", "offset": 5, "limit": 3}).json()
    assert found["total"] == 118 and [i["index"] for i in found["items"]] == [5, 6, 8]
    assert api.get(base, params={"limit": 0}).status_code == 422
    assert api.get(f"/datasets/{v['dataset_id']}/versions/999999/rows").status_code == 404


def test_stats_are_computed_by_the_worker_and_cached_on_the_version(api):
    v = upload(api, "audited", jsonl(GOOD + GOOD[:3])).json()["version"]
    assert v["audit_cached"] is True  # the ingest job computed it
    url = f"/datasets/{v['dataset_id']}/versions/{v['id']}/stats"
    first = api.get(url)
    assert first.status_code == 200, first.text
    stats = first.json()
    assert stats["cached"] is True and stats["rows"] == 15 and stats["sha256"] == v["sha256"]
    assert stats["duplicates"]["exact_duplicates"] == 3

    # A refresh (or a version without statistics) queues an `audit` data job: 202, never computed in the API.
    queued = api.get(url, params={"refresh": True})
    assert queued.status_code == 202, queued.text
    job = queued.json()
    assert job["kind"] == "data" and job["algorithm"] == "audit" and job["config"]["version_id"] == v["id"]
    assert api.get(url, params={"refresh": True}).json()["id"] == job["id"]  # the same job while it is queued
    run_data_job(job["id"])
    assert api.get(f"/jobs/{job['id']}").json()["status"] == "succeeded"
    second = api.get(url).json()
    assert second["cached"] is True and second["distinct_1"] == stats["distinct_1"]
    assert api.get(f"/datasets/{v['dataset_id']}/versions/{v['id']}").json()["audit_cached"] is True


# ---------------------------------------------------------------------------------------------- operations


def _ops_url(v: dict) -> str:
    return f"/datasets/{v['dataset_id']}/versions/{v['id']}/operations"


def test_operation_parameters_are_validated_up_front(api):
    v = upload(api, "to-operate", jsonl(GOOD)).json()["version"]
    url = _ops_url(v)
    jobs_before = api.get("/jobs").json()["total"]

    def locs(body):
        r = api.post(url, json=body)
        assert r.status_code == 422, r.text
        return [(d["loc"], d["msg"]) for d in r.json()["detail"]]

    got = locs(
        {
            "operation": "clean",
            "params": {
                "recipe": {"operators": [{"op": "length_filter", "unit": "lines", "min": 1}, {"op": "no_such_op"}]}
            },
        }
    )
    assert [loc for loc, _ in got] == ["params.recipe.operators[0].unit", "params.recipe.operators[1].op"]
    assert locs({"operation": "clean", "params": {}})[0][0] == "params.recipe"
    assert locs({"operation": "explode"})[0][0] == "operation"
    assert locs({"operation": "dedup", "params": {"threshold": 1.5, "num_perm": 1}}) == [
        ("params.threshold", "must be <= 1.0, got 1.5"),
        ("params.num_perm", "must be >= 2, got 1"),
    ]
    assert locs({"operation": "dedup", "params": {"bands": 4}}) == [("params.bands", "bands and rows go together")]
    assert locs({"operation": "dedup", "params": {"treshold": 0.5}})[0][0] == "params.treshold"
    assert locs({"operation": "convert", "params": {"to": "preference_plain"}}) == [
        ("params.to", "format 'messages' cannot be converted to 'preference_plain'")
    ]
    assert locs({"operation": "convert", "params": {"to": "klingon"}})[0][0] == "params.to"
    assert locs({"operation": "score", "params": {"min": 0.5}})[0][0] == "params.by"
    assert locs({"operation": "decontaminate", "params": {"eval_sets": ["/etc/passwd", "demo/data/nope.jsonl"]}}) == [
        ("params.eval_sets[0]", locs({"operation": "decontaminate", "params": {"eval_sets": ["/etc/passwd"]}})[0][1]),
        ("params.eval_sets[1]", "no such file: demo/data/nope.jsonl"),
    ]
    assert (
        locs(
            {
                "operation": "clean",
                "params": {"recipe": [{"op": "length_filter", "unit": "tokens", "min": 1, "tokenizer": "/etc"}]},
            }
        )[0][0]
        == "params.recipe.operators[0].tokenizer"
    )
    assert api.post(url, content=b"operation=clean").status_code == 415
    assert api.get("/jobs").json()["total"] == jobs_before  # nothing queued


def test_operation_queues_a_data_job_listed_with_the_jobs(api):
    v = upload(api, "queued-op", jsonl(GOOD)).json()["version"]
    recipe = {"operators": [{"op": "normalize_whitespace"}]}
    r = api.post(_ops_url(v), json={"operation": "clean", "params": {"recipe": recipe}, "priority": 3})
    assert r.status_code == 202, r.text
    job = r.json()
    assert job["kind"] == "data" and job["algorithm"] == "clean" and job["status"] == "queued"
    assert job["max_steps"] == 100 and job["priority"] == 3 and job["warning"] is None
    assert job["config"]["dataset_id"] == v["dataset_id"] and job["config"]["version_id"] == v["id"]
    assert job["config"]["params"]["recipe"]["operators"][0]["op"] == "normalize_whitespace"
    assert "fields" in job["config"]["params"]["recipe"]["operators"][0]  # normalised: defaults recorded
    listed = api.get("/jobs", params={"algorithm": "clean"}).json()["items"]
    assert [j["id"] for j in listed] == [job["id"]]
    assert api.get(f"/jobs/{job['id']}", user="bob").status_code == 404
    # An unfinished data job holds the dataset.
    r = api.delete(f"/datasets/{v['dataset_id']}")
    assert r.status_code == 409 and f"data job {job['id']}" in r.json()["detail"]
    # Cancel works as for training jobs; then the dataset may go.
    assert api.post(f"/jobs/{job['id']}/cancel").json()["status"] == "cancelled"
    assert api.delete(f"/datasets/{v['dataset_id']}").status_code == 204


def test_delete_an_unused_dataset_removes_rows_and_files(api):
    shared = jsonl(GOOD[:6])
    keep = upload(api, "keeper", shared).json()["version"]
    r = upload(api, "doomed", shared)
    doomed = r.json()["version"]
    own = upload(api, "doomed", jsonl(GOOD[6:])).json()["version"]
    q = upload(api, "doomed", jsonl([*BAD_ROWS, chat("only here", "x")]), policy="quarantine").json()["version"]
    assert doomed["path"] == keep["path"]  # the same content is one file
    dataset_id = doomed["dataset_id"]
    assert api.delete(f"/datasets/{dataset_id}", user="bob").status_code == 404

    # A job config naming a version file holds the dataset (any path spelling resolving to it).
    from api_helpers import valid_config

    config = valid_config(data={"train_file": str(api.data_dir / own["path"]), "max_length": 64})
    r = api.post("/jobs", json={"name": "uses-it", "config": config})
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    r = api.delete(f"/datasets/{dataset_id}")
    assert r.status_code == 409 and f"job {job_id} references version {own['id']}" in r.json()["detail"]
    api.post(f"/jobs/{job_id}/cancel")
    assert api.delete(f"/jobs/{job_id}").status_code == 204

    assert api.delete(f"/datasets/{dataset_id}").status_code == 204
    assert api.get(f"/datasets/{dataset_id}").status_code == 404
    files = store_files(api.data_dir)
    assert keep["path"].removeprefix("datasets/") in files  # still used by "keeper"
    assert own["path"].removeprefix("datasets/") not in files
    assert q["path"].removeprefix("datasets/") not in files
    assert not any(f.startswith(f"quarantine/{dataset_id}/") for f in files)
    assert (Path(api.data_dir) / keep["path"]).read_bytes() == shared


def test_operations_are_listed_with_their_parameter_schemas(api):
    response = api.get("/datasets/operations")
    assert response.status_code == 200
    operations = response.json()
    assert set(operations) == {"clean", "dedup", "convert", "score", "decontaminate"}
    for name, entry in operations.items():
        schema = entry["params_schema"]
        assert schema["type"] == "object" and "properties" in schema, name
    assert api.get("/datasets/operations", headers={"Authorization": "Bearer tp_wrong"}).status_code == 401


def test_dataset_listings_summarise_the_current_version(api):
    created = upload(api, "summarised", jsonl(GOOD[:3]))
    assert created.status_code == 201, created.text
    items = api.get("/datasets", user="root").json()["items"]
    assert any(item["name"] == "summarised" and item["current_version"]["rows"] == 3 for item in items)
    for item in items:
        current = item["current_version"]
        if item["current_version_id"] is None:
            assert current is None
            continue
        version = api.get(f"/datasets/{item['id']}/versions/{item['current_version_id']}", user="root").json()
        assert current == {
            k: version[k] for k in ("id", "sha256", "format", "rows", "size_bytes", "operation", "created_at")
        }


def test_a_cancelled_upload_leaves_its_staged_file_to_the_sweep(api):
    from training_platform.core.settings import get_settings
    from training_platform.db.session import session_scope
    from training_platform.services import datasets as dataset_service

    accepted = upload_only(api, "never-ingested", jsonl(GOOD[:2]))
    assert accepted.status_code == 202, accepted.text
    job = accepted.json()["job"]
    staged = job["config"]["staged"]
    assert staged.startswith("datasets/staging/") and (api.data_dir / staged).is_file()
    with session_scope() as session:  # queued: its file is kept whatever its age
        assert dataset_service.sweep_staging(session, get_settings(), older_than_s=0) == []
    assert api.post(f"/jobs/{job['id']}/cancel").json()["status"] == "cancelled"
    with session_scope() as session:
        assert dataset_service.sweep_staging(session, get_settings()) == []  # recent: perhaps still streaming in
        assert dataset_service.sweep_staging(session, get_settings(), older_than_s=0) == [staged]
    assert staged_files(api.data_dir) == []

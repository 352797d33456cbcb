"""Bounded inputs: ids and offsets beyond the database's INTEGER, config integers beyond realistic maxima,
NaN/Infinity, NUL characters and deep nesting are 422s naming the field (never a 500), on SQLite and PostgreSQL;
the OpenAPI spec documents the real 422 body and the status codes each operation answers."""

from __future__ import annotations

import json

import pytest
from api_helpers import API, valid_config

BIG = 2**31  # one past PostgreSQL's INTEGER


def _locs(r) -> list[str]:
    assert r.status_code == 422, r.text
    return [item["loc"] for item in r.json()["detail"]]


@pytest.mark.parametrize(
    "path, loc",
    [
        (f"/jobs/{BIG}", "path.job_id"),
        (f"/jobs/{2**63}/events", "path.job_id"),
        ("/jobs/0", "path.job_id"),
        (f"/datasets/{BIG}", "path.dataset_id"),
        (f"/datasets/1/versions/{BIG}", "path.version_id"),
        (f"/evaluations/{10**30}", "path.evaluation_id"),
        (f"/schedules/{BIG}", "path.schedule_id"),
        (f"/models/{BIG}", "path.model_id"),
        (f"/jobs?offset={BIG}", "query.offset"),
        (f"/evaluations?job_id={BIG}", "query.job_id"),
        (f"/evaluations/compare?a={BIG}&b=1", "query.a"),
        ("/jobs?q=a%00b", "query.q"),
    ],
)
def test_out_of_range_parameters_are_422(api, path, loc):
    assert loc in _locs(api.get(path))


def test_largest_id_is_a_plain_404(api):
    assert api.get(f"/jobs/{BIG - 1}").status_code == 404
    assert api.get(f"/datasets/{BIG - 1}").status_code == 404


@pytest.mark.parametrize(
    "section, field, value",
    [
        ("training", "max_steps", 10**30),
        ("training", "max_steps", 10**7 + 1),
        ("training", "save_steps", 2**31),
        ("training", "warmup_steps", 2**63),
        ("data", "shuffle_seed", 2**32),
        ("data", "max_train_samples", 10**12),
    ],
)
def test_config_integers_have_maxima(api, section, field, value):
    config = valid_config()
    config[section] = {**config[section], field: value}
    assert f"{section}.{field}" in _locs(api.post("/jobs", json={"name": "big", "config": config}))


@pytest.mark.parametrize("constant", ["Infinity", "-Infinity", "NaN"])
def test_non_finite_numbers_anywhere_in_a_body_are_422(api, constant):
    config = valid_config()
    body = json.dumps({"name": "nan", "config": config}).replace('"max_length": 64', f'"max_length": {constant}')
    r = api.post("/jobs", content=body, headers={"Content-Type": "application/json"})
    assert _locs(r) == ["data.max_length"]  # config fields are named as in the YAML
    assert "finite" in r.json()["detail"][0]["msg"]
    # ... also where the schema takes any JSON value (a clone override)
    job = api.post("/jobs", json={"name": "ok", "config": valid_config()}).json()["id"]
    r = api.post(
        f"/jobs/{job}/clone",
        content=f'{{"overrides": {{"training.learning_rate": {constant}}}}}',
        headers={"Content-Type": "application/json"},
    )
    assert _locs(r) == ["overrides.training.learning_rate"]


def test_nul_characters_are_422(api):
    assert _locs(api.post("/jobs", json={"name": "a\x00b", "config": valid_config()})) == ["name"]
    config = valid_config()
    config["data"]["field_map"] = {"prompt\x00": "x"}
    assert _locs(api.post("/jobs", json={"name": "n", "config": config})) == ["data.field_map"]
    assert _locs(api.post("/models", json={"name": "m", "path": "demo/\x00model"})) == ["path"]
    r = api.post(
        "/jobs",
        content='{"name": "lone \\ud800 surrogate", "config": {}}',
        headers={"Content-Type": "application/json"},
    )
    assert _locs(r) == ["name"] and "surrogate" in r.text


def test_deep_nesting_and_many_overrides_are_422(api):
    job = api.post("/jobs", json={"name": "ok", "config": valid_config()}).json()["id"]
    body = '{"overrides": {"training.x": ' + '{"a": ' * 5000 + "1" + "}" * 5000 + "}}"
    r = api.post(f"/jobs/{job}/clone", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and "nested too deeply" in r.text, r.text
    body = '{"overrides": {"training.x": ' + "[" * 100_000 + "]" * 100_000 + "}}"  # past Python's recursion limit
    r = api.post(f"/jobs/{job}/clone", content=body, headers={"Content-Type": "application/json"})
    assert _locs(r) == ["<body>"] and "nested too deeply" in r.text
    r = api.post(f"/jobs/{job}/clone", json={"overrides": {".".join(["a"] * 17): 1}})
    assert r.status_code == 422 and "parts" in r.text
    r = api.post(f"/jobs/{job}/clone", json={"overrides": {".".join(["a"] * 300): 1}})
    assert r.status_code == 422 and "at most 512 characters" in r.text
    r = api.post(f"/jobs/{job}/clone", json={"overrides": {f"tracking.k{i}": 1 for i in range(101)}})
    assert _locs(r) == ["overrides"]


def test_body_ids_are_bounded(api):
    r = api.post("/evaluations", json={"benchmarks": ["gsm8k"], "job_id": BIG})
    assert "job_id" in _locs(r)
    r = api.post("/schedules", json={"benchmarks": ["gsm8k"], "job_id": 2**63, "trigger": "checkpoint"})
    assert "job_id" in _locs(r)


def test_openapi_documents_the_real_422_and_every_status(api):
    spec = api.client.get(f"{API}/openapi.json").json()
    schemas = spec["components"]["schemas"]
    assert "HTTPValidationError" not in schemas
    assert schemas["ErrorItem"]["properties"]["loc"]["type"] == "string"
    for path, item in spec["paths"].items():
        for method, op in item.items():
            codes = set(op["responses"])
            if op.get("security"):
                assert "401" in codes, (method, path)
            if any(p["in"] == "path" for p in op.get("parameters", [])):
                assert "404" in codes, (method, path)
            if "422" in codes:
                assert op["responses"]["422"]["content"]["application/json"]["schema"]["$ref"].endswith(
                    "/ValidationErrorOut"
                ), (method, path)
    clone = spec["paths"][f"{API}/jobs/{{job_id}}/clone"]["post"]
    assert {"401", "404", "409", "413", "415", "422"} <= set(clone["responses"])
    assert clone["parameters"][0]["schema"]["maximum"] == BIG - 1


def test_error_messages_hide_the_data_dir(api):
    from training_platform.api.errors import scrub

    root = str(api.data_dir)
    assert scrub(f"cannot read {root}/store/tmp/upload-{'0' * 32}.jsonl: x") == "cannot read <the uploaded file>: x"
    assert scrub(f"no such file: {root}/runs/job-1/final") == "no such file: runs/job-1/final"

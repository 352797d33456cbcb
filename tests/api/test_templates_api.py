"""Job templates on a real database (SQLite and PostgreSQL): CRUD, sharing, visibility, duplicate names."""

from __future__ import annotations

import uuid

import pytest
from api_helpers import valid_config

pytestmark = pytest.mark.integration


def _name(prefix: str = "tpl") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def make(api, user="alice", **body) -> dict:
    body.setdefault("name", _name())
    body.setdefault("config", valid_config())
    r = api.post("/templates", user=user, json=body)
    assert r.status_code == 201, r.text
    return r.json()


def problems(r) -> dict[str, str]:
    assert r.status_code == 422, r.text
    return {item["loc"]: item["msg"] for item in r.json()["detail"]}


def test_crud(api):
    config = valid_config(training={"max_steps": 7, "per_device_batch_size": 2})
    t = make(api, name="my-sft", description="small sft", config=config)
    assert t["owner"] == "alice" and t["shared"] is False and t["config"] == config  # stored as written
    assert t["description"] == "small sft" and t["created_at"] == t["updated_at"]
    assert api.get(f"/templates/{t['id']}").json() == t

    changed = valid_config(training={"max_steps": 9, "per_device_batch_size": 2})
    r = api.patch(f"/templates/{t['id']}", json={"name": "my-sft-2", "config": changed})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["name"] == "my-sft-2" and body["config"] == changed and body["description"] == "small sft"
    assert body["updated_at"] >= t["updated_at"]
    assert api.patch(f"/templates/{t['id']}", json={}).json()["name"] == "my-sft-2"  # nothing sent: unchanged

    listed = api.get("/templates", params={"q": "MY-SFT"}).json()
    assert [i["id"] for i in listed["items"]] == [t["id"]] and listed["total"] == 1

    assert api.delete(f"/templates/{t['id']}").status_code == 204
    assert api.get(f"/templates/{t['id']}").status_code == 404
    assert api.delete(f"/templates/{t['id']}").status_code == 404


def test_config_is_checked_by_schema_and_rules_but_paths_only_at_submit(api):
    found = problems(
        api.post(
            "/templates",
            json={"name": _name(), "config": valid_config(training={"learning_rate": 5, "per_device_batch_size": 2})},
        )
    )
    assert list(found) == ["training.learning_rate"] and "<= 1" in found["training.learning_rate"]
    found = problems(api.post("/templates", json={"name": _name(), "config": {"algorithm": {"name": "nope"}}}))
    assert "algorithm.name" in found
    t = make(api)
    found = problems(api.patch(f"/templates/{t['id']}", json={"config": {**valid_config(), "extra": 1}}))
    assert found == {"extra": "unknown field"} or list(found) == ["extra"], found
    # a path outside the caller's areas is kept: POST /jobs checks it with the submitter's rights
    outside = make(api, config=valid_config(model={"path": "/etc"}))
    assert outside["config"]["model"]["path"] == "/etc"
    r = api.post("/jobs", json={"name": "from template", "config": outside["config"]})
    assert r.status_code == 422 and "model.path" in problems(r)


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"name": "x" * 129}, "name"),
        ({"name": "has space"}, "name"),
        ({"name": ""}, "name"),
        ({"description": "d" * 2001}, "description"),
        ({"shared": "yes"}, "shared"),
        ({"config": {**valid_config(), "pad": "x" * 70_000}}, "config"),
        ({"unknown": 1}, "unknown"),
    ],
)
def test_bounds(api, body, loc):
    full = {"name": _name(), "config": valid_config(), **body}
    assert loc in problems(api.post("/templates", json=full))


def test_duplicate_name_per_owner_is_409(api):
    name = _name("dup")
    first = make(api, name=name)
    r = api.post("/templates", json={"name": name, "config": valid_config()})
    assert r.status_code == 409 and name in r.json()["detail"]
    make(api, user="bob", name=name)  # another owner: fine
    other = make(api)
    r = api.patch(f"/templates/{other['id']}", json={"name": name})
    assert r.status_code == 409, r.text
    assert api.patch(f"/templates/{first['id']}", json={"name": name}).status_code == 200  # its own name


def test_sharing_and_visibility(api):
    marker = _name("vis")
    t = make(api, name=marker)
    tid = t["id"]
    # unshared: invisible to bob (404, not 403: ids do not leak)
    for method in ("get", "patch", "delete"):
        kwargs = {"json": {"description": "x"}} if method == "patch" else {}
        assert getattr(api, method)(f"/templates/{tid}", user="bob", **kwargs).status_code == 404
    assert api.get("/templates", user="bob", params={"q": marker}).json()["total"] == 0
    assert api.get("/templates", user="root", params={"q": marker}).json()["total"] == 1  # admins see all
    assert api.get("/templates/2147483647").status_code == 404

    assert api.patch(f"/templates/{tid}", json={"shared": True}).json()["shared"] is True
    seen = api.get(f"/templates/{tid}", user="bob")
    assert seen.status_code == 200 and seen.json()["owner"] == "alice"
    assert [i["id"] for i in api.get("/templates", user="bob", params={"q": marker}).json()["items"]] == [tid]
    # read-only for others
    r = api.patch(f"/templates/{tid}", user="bob", json={"description": "mine now"})
    assert r.status_code == 403, r.text
    assert api.delete(f"/templates/{tid}", user="bob").status_code == 403
    # an admin may change and delete
    r = api.patch(f"/templates/{tid}", user="root", json={"description": "by root"})
    assert r.status_code == 200 and r.json()["owner"] == "alice" and r.json()["description"] == "by root"
    assert api.delete(f"/templates/{tid}", user="root").status_code == 204
    assert api.get(f"/templates/{tid}").status_code == 404


def test_listing_is_paginated(api):
    prefix = _name("page")
    ids = [make(api, name=f"{prefix}-{i}")["id"] for i in range(3)]
    first = api.get("/templates", params={"q": prefix, "limit": 2}).json()
    second = api.get("/templates", params={"q": prefix, "limit": 2, "offset": 2}).json()
    assert first["total"] == second["total"] == 3
    assert [i["id"] for i in first["items"] + second["items"]] == ids
    assert api.get("/templates", params={"limit": 201}).status_code == 422

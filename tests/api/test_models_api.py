"""Registered models: validation by really loading the config and tokenizer, permissions, use in job configs."""

from __future__ import annotations

import json
import shutil

import pytest
from api_helpers import row_counts, valid_config

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def broken_models(sqlite_api):
    root = sqlite_api.data_dir / "users" / "alice" / "broken_models"  # alice's own area
    if root.exists():
        shutil.rmtree(root)
    garbage = root / "garbage"
    garbage.mkdir(parents=True)
    (garbage / "config.json").write_text("{not json")
    no_tokenizer = root / "no_tokenizer"
    no_tokenizer.mkdir()
    shutil.copy(sqlite_api.data_dir / "demo/model/config.json", no_tokenizer / "config.json")
    (root / "empty").mkdir()
    no_weights = root / "no_weights"
    shutil.copytree(sqlite_api.data_dir / "demo/model", no_weights)
    for weights in no_weights.glob("*.safetensors"):
        weights.unlink()
    return root


def test_register_use_and_delete_a_model(sqlite_api):
    api = sqlite_api
    r = api.post("/models", json={"name": "tiny-qwen", "path": "demo/model"})
    assert r.status_code == 201, r.text
    model = r.json()
    assert model["name"] == "tiny-qwen" and model["owner"] == "alice"
    assert model["path"] == "demo/model" and not model["shared"]  # shown relative to TP_DATA_DIR
    info = model["info"]
    assert info["model_type"] == "qwen2" and info["vocab_size"] > 0 and info["max_position_embeddings"] > 0
    assert isinstance(info["has_chat_template"], bool) and info["num_parameters"] > 1000

    # Unshared: another user neither sees it nor can use it by name; shared: both.
    assert api.get(f"/models/{model['id']}", user="bob").status_code == 404
    assert "tiny-qwen" not in {m["name"] for m in api.get("/models?limit=200", user="bob").json()["items"]}
    assert (
        api.client.patch(f"/api/v1/models/{model['id']}", json={"shared": True}, headers=api.h("bob")).status_code
        == 404
    )
    r = api.client.patch(f"/api/v1/models/{model['id']}", json={"shared": True}, headers=api.h("alice"))
    assert r.status_code == 200 and r.json()["shared"] is True, r.text
    assert api.get(f"/models/{model['id']}", user="bob").json()["name"] == "tiny-qwen"
    listing = api.get("/models?limit=10", user="bob").json()
    assert listing["total"] >= 1 and "tiny-qwen" in {m["name"] for m in listing["items"]}
    assert (
        api.client.patch(f"/api/v1/models/{model['id']}", json={"shared": False}, headers=api.h("bob")).status_code
        == 403
    )

    # A registered name works as model.path; the stored config carries its path.
    r = api.post("/jobs", json={"name": "on tiny", "config": valid_config(model={"path": "tiny-qwen"})})
    assert r.status_code == 201, r.text
    assert r.json()["config"]["model"]["path"] == str(api.data_dir / "demo" / "model")

    assert api.delete(f"/models/{model['id']}", user="bob").status_code == 403
    assert api.delete(f"/models/{model['id']}").status_code == 204
    assert api.get(f"/models/{model['id']}").status_code == 404
    assert (api.data_dir / "demo" / "model" / "config.json").exists()  # files are never deleted

    other = api.post("/models", user="bob", json={"name": "bobs", "path": str(api.data_dir / "demo/reward_model")})
    assert other.status_code == 201, other.text
    assert api.delete(f"/models/{other.json()['id']}", user="root").status_code == 204


@pytest.mark.parametrize(
    ("case", "body", "status", "fragment"),
    [
        ("does-not-load", {"name": "garbage", "path": "broken_models/garbage"}, 422, "cannot load the model config"),
        ("no-tokenizer", {"name": "notok", "path": "broken_models/no_tokenizer"}, 422, "cannot load the tokenizer"),
        ("no-weights", {"name": "noweights", "path": "broken_models/no_weights"}, 422, "no weights"),
        ("empty-dir", {"name": "empty", "path": "broken_models/empty"}, 422, "cannot load the model config"),
        ("missing-dir", {"name": "missing", "path": "broken_models/nope"}, 422, "is not a directory"),
        ("outside", {"name": "etc", "path": "/etc"}, 422, "outside the allowed directories"),
        ("symlink-escape", {"name": "esc", "path": "escape/ssl"}, 422, "outside the allowed directories"),
        ("bad-name", {"name": "a/b", "path": "demo/model"}, 422, "may only contain"),
        ("missing-path", {"name": "x"}, 422, "required field is missing"),
        ("duplicate", {"name": "dup", "path": "demo/model"}, 409, "already exists"),
    ],
)
def test_bad_model_registrations(sqlite_api, broken_models, case, body, status, fragment):
    api = sqlite_api
    if body.get("path", "").startswith("broken_models/"):
        body = {**body, "path": "users/alice/" + body["path"]}
    if case == "duplicate":
        assert api.post("/models", json=body).status_code == 201
    before = row_counts()
    r = api.post("/models", json=body)
    assert r.status_code == status, r.text
    assert fragment in json.dumps(r.json()["detail"]), r.json()
    assert row_counts() == before


def test_unknown_model_is_404(sqlite_api):
    assert sqlite_api.get("/models/424242").status_code == 404
    assert sqlite_api.delete("/models/424242").status_code == 404

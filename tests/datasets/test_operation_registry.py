"""Dataset operations are a registry (`training_platform.data.operations`): an operation defined here, in the test,
with `@register_operation` is listed by `GET /datasets/operations`, accepted by the POST route, validated (with its
own checks and the path policy over its marked fields) and run by the data worker, with no other file touched.
Unknown names are refused naming `operation` and the valid ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ds_helpers import chat, jsonl, run_data_job, upload
from pydantic import Field

from training_platform.core.userpath import UserFile
from training_platform.data.operations import (
    OPERATIONS,
    CheckContext,
    FieldErrors,
    Operation,
    OperationParams,
    OperationResult,
    RunContext,
    register_operation,
    unregister_operation,
)

pytestmark = pytest.mark.integration

NAME = "shout_test"


class ShoutParams(OperationParams):
    suffix: str = Field("!", max_length=8, description="Appended to every assistant turn.")
    times: int = Field(1, ge=1, le=3)
    note_file: UserFile | None = Field(None, description="A file the caller must be able to read.")


class Shout(Operation[ShoutParams]):
    """Upper-case every assistant turn (a test operation)."""

    example = {"suffix": "!"}

    def check(self, params: ShoutParams, out: dict[str, Any], ctx: CheckContext) -> FieldErrors:
        if params.suffix.strip() == "":
            return [("params.suffix", "must not be blank")]
        out["suffix"] = params.suffix.strip()  # normalised (idempotent: the worker checks the job's params again)
        return []

    def run(self, params: dict[str, Any], source: Path, output: Path, ctx: RunContext) -> OperationResult:
        rows = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
        for row in rows:
            for turn in row["messages"]:
                if turn["role"] == "assistant":
                    turn["content"] = turn["content"].upper() + params["suffix"] * params["times"]
        output.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return OperationResult(output, {"shouted": len(rows)}, {"input_rows": len(rows), "output_rows": len(rows)})


@pytest.fixture
def shout():
    register_operation(NAME, ShoutParams)(Shout)
    try:
        yield OPERATIONS[NAME]
    finally:
        unregister_operation(NAME)


def test_a_registered_operation_is_listed_validated_and_run(api, shout):
    listed = api.get("/datasets/operations").json()
    assert {"clean", "dedup", "convert", "score", "decontaminate", NAME} <= set(listed)
    entry = listed[NAME]
    assert entry["description"] == "Upper-case every assistant turn (a test operation)."
    assert entry["params_schema"]["properties"]["times"]["maximum"] == 3
    assert entry["example"] == {"suffix": "!"} and entry["example_by_format"] == {}

    v = upload(api, "shouted", jsonl([chat("hi", "hello"), chat("bye", "see you")])).json()["version"]
    url = f"/datasets/{v['dataset_id']}/versions/{v['id']}/operations"

    def locs(params: dict) -> list[str]:
        r = api.post(url, json={"operation": NAME, "params": params})
        assert r.status_code == 422, r.text
        return [d["loc"] for d in r.json()["detail"]]

    assert locs({"times": 9}) == ["params.times"]  # its Params' bounds
    assert locs({"suffix": "  "}) == ["params.suffix"]  # its own check
    assert locs({"loud": True}) == ["params.loud"]  # unknown parameters
    assert locs({"note_file": "/etc/passwd"}) == ["params.note_file"]  # the path policy over its marked fields

    r = api.post(url, json={"operation": NAME, "params": {"suffix": " ! ", "times": 2}})
    assert r.status_code == 202, r.text
    job = r.json()
    assert job["algorithm"] == NAME and job["config"]["params"] == {"suffix": "!", "times": 2, "note_file": None}
    run_data_job(job["id"])
    done = api.get(f"/jobs/{job['id']}").json()
    assert done["status"] == "succeeded", done
    versions = api.get(f"/datasets/{v['dataset_id']}/versions", params={"job_id": job["id"]}).json()["items"]
    assert len(versions) == 1 and versions[0]["operation"] == NAME and versions[0]["parent_version_id"] == v["id"]
    assert versions[0]["stats"] == {"input_rows": 2, "output_rows": 2}
    rows = api.get(f"/datasets/{v['dataset_id']}/versions/{versions[0]['id']}/rows").json()["items"]
    assert rows[0]["row"]["messages"][1]["content"] == "HELLO!!"


def test_unknown_operations_are_refused_with_the_valid_names(api, shout):
    v = upload(api, "unknown-op", jsonl([chat("a", "b")])).json()["version"]
    r = api.post(f"/datasets/{v['dataset_id']}/versions/{v['id']}/operations", json={"operation": "explode"})
    assert r.status_code == 422, r.text
    [detail] = r.json()["detail"]
    assert detail["loc"] == "operation"
    assert "unknown operation 'explode'" in detail["msg"]
    for name in ("clean", "dedup", "convert", "score", "decontaminate", NAME):
        assert name in detail["msg"]
    # The service refuses it too (a job config naming an operation that is no longer registered).
    from training_platform.core.settings import get_settings
    from training_platform.services.dataset_operations import OperationInvalid, validate_operation

    with pytest.raises(OperationInvalid) as info:
        validate_operation("explode", {}, get_settings(), reader=None)  # type: ignore[arg-type]
    assert info.value.errors[0][0] == "operation" and NAME in info.value.errors[0][1]


def test_registering_a_name_twice_is_refused(shout):
    with pytest.raises(ValueError, match="registered twice"):
        register_operation(NAME, ShoutParams)(Shout)

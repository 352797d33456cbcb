"""validate, convert and report (audit) on Ray (`executor: ray`) give the local answer: on the session's 2-node Ray
cluster, with small blocks (many of them, on both nodes), each operation's output files (bytes and sha256) and
report equal the local run's apart from where it ran; a bad row on Ray is the local error; `tp data` takes the
executor."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from data_helpers import run_data_cli, write_jsonl
from ray_fixtures import CLUSTER_CPUS  # noqa: E402 - the session cluster: one Ray worker per CPU

from training_platform.core.files import sha256_file
from training_platform.data.convert import convert_file
from training_platform.data.executors import get_executor
from training_platform.data.formats import DatasetError
from training_platform.data.report import audit_file
from training_platform.data.validate import ingest_file, validate_file

pytestmark = pytest.mark.integration

BLOCK_ROWS = 97
_WORD_LIST = (
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau upsilon "
    "phi chi psi omega apple banana cherry grape lemon mango melon olive peach pear plum"
)
WORDS = _WORD_LIST.split()


@pytest.fixture(scope="module")
def ray_env(ray_cluster):
    return ray_cluster.address  # the session cluster keeps Ray on loopback (tests/ray_fixtures.py)


def _ray(address: str):
    return get_executor("ray", address=address, block_rows=BLOCK_ROWS)


def _sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """Alpaca rows (with exact and near duplicates, arithmetic, a system prompt, input), an upload with bad rows
    (schema, invalid JSON, blank lines) across several blocks, and RL prompt rows."""
    rng = random.Random(7)
    root = tmp_path_factory.mktemp("ray-ops")
    alpaca = []
    for i in range(520):
        a, b = rng.randint(1, 99), rng.randint(1, 99)
        row = {
            "instruction": f"{_sentence(rng, rng.randint(4, 14))} what is {a} + {b}?",
            "input": _sentence(rng, 5) if i % 7 == 0 else "",
            "output": f"{a} + {b} = {a + b}. {_sentence(rng, rng.randint(3, 30))}",
        }
        if i % 11 == 0:
            row["system"] = "You are a careful tutor."
        alpaca.append(row)
    alpaca += [dict(r) for r in alpaca[:30]]  # exact duplicates
    alpaca += [{**r, "output": r["output"] + " indeed"} for r in alpaca[40:60]]  # near duplicates
    paths = {"alpaca": write_jsonl(root / "alpaca.jsonl", alpaca)}

    lines = []
    for i, row in enumerate(alpaca[:400]):
        if i % 53 == 4:
            row = {**row, "output": ""}  # a schema problem
        lines.append(json.dumps(row))
        if i % 61 == 9:
            lines.append("{not json")
        if i % 83 == 2:
            lines.append("")
    paths["upload"] = root / "upload.jsonl"
    paths["upload"].write_text("\n".join(lines) + "\n")

    rl = [
        {"prompt": f"What is {i} + {i + 1}?", "answer": str(2 * i + 1), "source_id": i, "data_source": "arith"}
        if i % 3
        else {"prompt": [{"role": "user", "content": f"Add {i} and 2."}], "answer": i + 2}
        for i in range(330)
    ]
    paths["rl"] = write_jsonl(root / "rl.jsonl", rl)
    return paths


def _same(report: dict) -> dict:
    """A report without what legitimately differs between executors: timings, where it ran, output paths."""
    return {k: v for k, v in report.items() if k not in ("seconds", "timings_s", "executor", "output")}


def test_validate_and_ingest_on_ray_equal_local(tmp_path, files, ray_env):
    """Ingest under the quarantine policy checks the rows as validate does (the same stage, keeping the rows)."""
    local = validate_file(files["upload"])
    assert len(local.bad_rows) >= 10 and local.valid_rows > 300
    assert local.executor == {"name": "local", "workers": 1}
    outputs = {}
    for name, executor in (("local", None), ("ray", _ray(ray_env))):
        dest = tmp_path / name / "ds.jsonl"
        report = ingest_file(files["upload"], dest, policy="quarantine", executor=executor)
        assert report.accepted and report.quarantine is not None
        outputs[name] = (dest.read_bytes(), Path(report.quarantine).read_bytes(), report)
    (good, quarantined, on_ray), (local_good, local_quarantined, ingested) = outputs["ray"], outputs["local"]
    assert good == local_good and quarantined == local_quarantined and len(quarantined.splitlines()) >= 10
    assert (
        on_ray.executor is not None and on_ray.executor["name"] == "ray" and on_ray.executor["workers"] == CLUSTER_CPUS
    )
    assert on_ray.lines() == ingested.lines() == local.lines()
    validated = {k: v for k, v in local.to_dict(max_rows=None).items() if k not in ("policy", "accepted")}
    for report in (on_ray, ingested):
        assert {**_same(report.to_dict(max_rows=None)), "quarantine": None, "policy": None, "accepted": None} == {
            **_same(validated),
            "policy": None,
            "accepted": None,
        }


@pytest.mark.parametrize(
    ("source", "to", "suffix"),
    [("alpaca", "messages", ".jsonl"), ("rl", "verl", ".parquet")],
)
def test_convert_on_ray_equals_local(tmp_path, files, ray_env, source, to, suffix):
    local_out, ray_out = tmp_path / f"local{suffix}", tmp_path / f"ray{suffix}"
    local = convert_file(files[source], local_out, to, data_source="arith-default", ability="math")
    on_ray = convert_file(
        files[source], ray_out, to, data_source="arith-default", ability="math", executor=_ray(ray_env)
    )
    assert local_out.read_bytes() == ray_out.read_bytes() and sha256_file(local_out) == sha256_file(ray_out)
    assert _same(on_ray.to_dict()) == _same(local.to_dict()) and local.converted == local.rows > 300
    assert on_ray.to_dict()["executor"]["name"] == "ray" and local.to_dict()["executor"]["name"] == "local"


def test_convert_bad_rows_on_ray_are_the_local_error(tmp_path, files, ray_env):
    """Rows that cannot be alpaca (several turns), in several blocks, plus invalid JSON: every problem, in order."""
    rows = [json.loads(line) for line in files["alpaca"].read_text().splitlines()[:300]]
    path = tmp_path / "chat.jsonl"
    lines = []
    for i, row in enumerate(rows):
        messages = [{"role": "user", "content": row["instruction"]}, {"role": "assistant", "content": row["output"]}]
        if i % 45 == 3:
            messages += messages
        lines.append(json.dumps({"messages": messages}))
        if i == 250:
            lines.append("{oops")
    path.write_text("\n".join(lines) + "\n")
    errors = {}
    for name, executor in (("local", None), ("ray", _ray(ray_env))):
        with pytest.raises(DatasetError) as raised:
            convert_file(path, tmp_path / f"{name}.jsonl", "alpaca", executor=executor)
        errors[name] = raised.value
        assert not (tmp_path / f"{name}.jsonl").exists()
    assert str(errors["ray"]) == str(errors["local"]) and len(errors["local"].rows) == 8
    assert "invalid JSON" in str(errors["local"]) and "alpaca holds one user turn" in str(errors["local"])


def test_report_on_ray_equals_local(tmp_path, files, demo, ray_env):
    local = audit_file(files["alpaca"], tokenizer=demo["model"], report_path=tmp_path / "local.json")
    on_ray = audit_file(files["alpaca"], tokenizer=demo["model"], executor=_ray(ray_env))
    assert _same(on_ray) == _same(local)
    assert local["stats"]["tokens"]["count"] == local["rows"] == 570 and local["stats"]["tokens"]["min"] > 5
    assert local["duplicates"]["exact_duplicates"] >= 30 and local["duplicates"]["near_duplicates"] > 0
    assert set(local["difficulty_buckets"].values()) != {0} and 0 < local["distinct_2"] < 1
    assert local["executor"] == {"name": "local", "workers": 1} and on_ray["executor"]["name"] == "ray"
    assert json.loads((tmp_path / "local.json").read_text())["sha256"] == local["sha256"]


def test_a_bad_row_in_report_on_ray_is_the_local_error(tmp_path, ray_env):
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps({"text": f"row number {i} here"}) + "\n" for i in range(250)) + "{oops\n")
    errors = []
    for executor in (None, _ray(ray_env)):
        with pytest.raises(DatasetError) as raised:
            audit_file(path, dedup=False, executor=executor)
        errors.append(str(raised.value))
    assert errors[0] == errors[1] and "line 251" in errors[0]


def test_tp_data_takes_the_executor_for_validate_convert_and_report(tmp_path, files, ray_env):
    extra = ["--report", tmp_path / "ray.json", "--executor", "ray", "--ray-address", ray_env]
    on_ray = run_data_cli("validate", files["upload"], *extra)
    local = run_data_cli("validate", files["upload"], "--report", tmp_path / "local.json", "--executor", "local")
    assert on_ray.exit_code == local.exit_code == 2 and on_ray.stdout == local.stdout, on_ray
    assert on_ray.stdout.splitlines()[0] == "alpaca" and len(on_ray.stdout.splitlines()) > 10
    reports = [json.loads((tmp_path / f"{name}.json").read_text()) for name in ("ray", "local")]
    assert reports[0]["executor"]["name"] == "ray" and _same(reports[0]) == _same(reports[1])
    for command, args in (
        ("report", ["--output", tmp_path / "r.json"]),
        ("validate", []),
        ("convert", ["--to", "messages", "--output", tmp_path / "c.jsonl"]),
    ):
        bad = run_data_cli(command, files["alpaca"], *args, "--executor", "bogus")
        assert bad.exit_code == 2 and "--executor" in bad.stderr, (command, bad)
    assert not (tmp_path / "r.json").exists() and not (tmp_path / "c.jsonl").exists()

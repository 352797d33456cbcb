"""`score` and `decontaminate` on Ray (`executor: ray`) give the local answer: on the session's 2-node Ray cluster,
with small blocks spread over both nodes, the output file (bytes and sha256) and the report equal the local run's:
heuristics and the judge (which runs in the driver), perplexity under the demo model (batches cut by block
boundaries are scored in the driver, so each row is padded with the same rows), and decontamination against
planted eval rows.
A bad row is the local error; `tp data score|decontaminate` take `--executor`."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from data_helpers import read_jsonl, run_data_cli, write_jsonl
from ray_fixtures import CLUSTER_CPUS  # noqa: E402 - the session cluster: one Ray worker per CPU
from synthetic_corpus import planted_corpus

from training_platform.core.endpoints import Endpoint, Endpoints
from training_platform.core.files import sha256_file
from training_platform.data.contamination import decontaminate_file
from training_platform.data.executors import get_executor
from training_platform.data.formats import DatasetError
from training_platform.data.score import SCORES_KEY, score_file

pytestmark = pytest.mark.integration

VARYING = ("seconds", "executor", "output", "version")  # what legitimately differs between two runs


@pytest.fixture(scope="module")
def ray_env(ray_cluster):
    """The cluster's address, with this process connected to it for the module (an executor uses a connected driver
    as it is: test_data_ray.py covers connecting per operation), so the Ray workers and their imports serve every
    test here."""
    from training_platform.data.executors.ray_data import ray_session

    with ray_session(ray_cluster.address):
        yield ray_cluster.address


def _ray(address: str, block_rows: int = 97):
    return get_executor("ray", address=address, block_rows=block_rows)


def _same(local: dict, on_ray: dict, local_out: Path, ray_out: Path) -> None:
    assert ray_out.read_bytes() == local_out.read_bytes()
    assert sha256_file(ray_out) == sha256_file(local_out)
    assert {k: v for k, v in on_ray.items() if k not in VARYING} == {k: v for k, v in local.items() if k not in VARYING}
    assert on_ray["executor"]["name"] == "ray" and on_ray["executor"]["workers"] == CLUSTER_CPUS
    assert local["executor"] == {"name": "local", "workers": 1}


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory) -> Path:
    """Rows of no detectable format first (all their fields are text), then `text` rows (their `text` only)."""
    texts = planted_corpus(600, seed=5, min_words=5, max_words=60).texts
    rows: list = [{"note": "no format yet", "extra": f"field {i} counts"} for i in range(3)]
    for i, text in enumerate(texts):
        rows.append({"text": text if i % 53 else "buy now " * 40, "id": i, "tag": "not scored"})
    return write_jsonl(tmp_path_factory.mktemp("ray-score") / "corpus.jsonl", rows)


def _judge(request: httpx.Request) -> httpx.Response:
    text = json.loads(request.content)["messages"][0]["content"]
    return httpx.Response(200, json={"choices": [{"message": {"content": f"Score: {len(text.split()) % 11}"}}]})


def test_heuristics_and_the_judge_on_ray_equal_local(tmp_path, corpus_file, ray_env):
    """The heuristics run on the workers; the judge in the driver (its simulated server is in this process only)."""
    kwargs = {
        "judge": {"endpoint": "plain", "model": "j"},
        "judge_transport": httpx.MockTransport(_judge),
        "endpoints": Endpoints([Endpoint("plain", "http://judge.test/v1")]),
    }
    local = score_file(corpus_file, tmp_path / "local.jsonl", **kwargs)
    on_ray = score_file(corpus_file, tmp_path / "ray.jsonl", executor=_ray(ray_env), **kwargs)
    for report in (local, on_ray):  # latencies differ: the counters do not
        report["judge"] = {k: report["judge"][k] for k in ("rows", "requests", "cache_hits", "errors", "last_error")}
    _same(local, on_ray, tmp_path / "local.jsonl", tmp_path / "ray.jsonl")
    scored = read_jsonl(tmp_path / "ray.jsonl")
    assert local["format"] == "text" and local["rows"] == len(scored) == 603
    assert on_ray["judge"]["cache_hits"] > 0 and on_ray["scores"]["judge"]["count"] == 603
    assert scored[0][SCORES_KEY]["chars"] == len("no format yet\nfield 0 counts")  # before the format: every field
    assert scored[3][SCORES_KEY]["chars"] == len(scored[3]["text"])  # from it on: the format's


def test_perplexity_on_ray_equals_local(tmp_path, demo, ray_env):
    """Batches of 4 rows, blocks of 7: batches whole in a block are scored on the workers, the ones a block
    boundary cuts (and the last, short one) in the driver; every row is padded with the rows it is locally."""
    rows = read_jsonl(demo["data"] / "sft.jsonl")[:30]
    src = write_jsonl(tmp_path / "sft.jsonl", rows)
    kwargs = {"perplexity_model": demo["model"], "batch_size": 4}
    local = score_file(src, tmp_path / "local.jsonl", **kwargs)
    on_ray = score_file(src, tmp_path / "ray.jsonl", executor=_ray(ray_env, block_rows=7), **kwargs)
    _same(local, on_ray, tmp_path / "local.jsonl", tmp_path / "ray.jsonl")
    assert on_ray["perplexity"] == {"model": str(demo["model"]), "max_length": 512}
    assert on_ray["scores"]["perplexity"]["count"] == 30 and on_ray["scores"]["quality"]["count"] == 30


def test_decontaminate_on_ray_equals_local(tmp_path, ray_env):
    evals = planted_corpus(40, seed=11, min_words=20, max_words=30, dup_fraction=0.0, negative_fraction=0.0).texts
    eval_file = write_jsonl(tmp_path / "eval.jsonl", [{"text": t} for t in evals] + [{"text": "17+25="}])
    texts = planted_corpus(700, seed=12, min_words=10, max_words=40).texts
    rows: list = [{"note": " ".join(evals[0].split()[2:17])}]  # no format yet: every field is matched
    for i, text in enumerate(texts):
        if i % 37 == 3:  # a 15-word run of an eval row inside a training row
            words = evals[i % len(evals)].split()
            text = f"{text} {' '.join(words[1:16])} and more"
        rows.append({"text": text if i != 500 else "17+25=", "id": i})
    src = write_jsonl(tmp_path / "train.jsonl", rows)
    local = decontaminate_file(src, tmp_path / "local.jsonl", [eval_file])
    on_ray = decontaminate_file(src, tmp_path / "ray.jsonl", [eval_file], executor=_ray(ray_env))
    _same(local, on_ray, tmp_path / "local.jsonl", tmp_path / "ray.jsonl")
    planted = [0] + [i + 1 for i in range(len(texts)) if i % 37 == 3 or i == 500]
    assert local["contaminated_rows"] == planted and local["removed_rows"] == len(planted)
    assert local["output_rows"] == len(rows) - len(planted)
    assert on_ray["version"] == {**local["version"], **{k: on_ray["version"][k] for k in ("path", "created_at")}}


def test_a_bad_row_on_ray_is_the_local_error(tmp_path, ray_env):
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps({"text": f"row number {i} here"}) + "\n" for i in range(30)) + "{oops\n")
    eval_file = write_jsonl(tmp_path / "eval.jsonl", [{"text": "an eval row of its own words only"}])
    runs = {
        "score": lambda out, ex: score_file(path, out, executor=ex),
        "decontaminate": lambda out, ex: decontaminate_file(path, out, [eval_file], executor=ex),
    }
    for name, run in runs.items():
        with pytest.raises(DatasetError) as local:
            run(tmp_path / "o.jsonl", None)
        with pytest.raises(DatasetError) as on_ray:
            run(tmp_path / "o.jsonl", _ray(ray_env, block_rows=7))
        assert str(on_ray.value) == str(local.value) and "line 31" in str(local.value), name
        assert not (tmp_path / "o.jsonl").exists()


def test_tp_data_score_and_decontaminate_take_the_executor(tmp_path, corpus_file, ray_env):
    outputs = {}
    for executor in ("local", "ray"):
        extra = ["--ray-address", ray_env] if executor == "ray" else []
        out = tmp_path / f"{executor}.jsonl"
        args = ("--output", out, "--report", tmp_path / f"{executor}.json", "--executor", executor, *extra)
        result = run_data_cli("score", corpus_file, *args)
        assert result.exit_code == 0, result
        outputs[executor] = out.read_bytes()
    assert outputs["ray"] == outputs["local"]
    assert json.loads((tmp_path / "ray.json").read_text())["executor"]["name"] == "ray"
    bogus = run_data_cli("score", corpus_file, "--output", tmp_path / "b.jsonl", "--executor", "bogus")
    assert bogus.exit_code == 2 and "--executor: must be local or ray, got 'bogus'" in bogus.stderr, bogus
    eval_file = write_jsonl(tmp_path / "eval.jsonl", [{"text": "an eval row of its own words only"}])
    decon = ("decontaminate", corpus_file, "--eval-set", eval_file, "--output", tmp_path / "d.jsonl")
    assert run_data_cli(*decon, "--executor", "bogus").exit_code == 2
    local_with_address = run_data_cli(*decon, "--executor", "local", "--ray-address", ray_env)
    assert local_with_address.exit_code == 2 and "--ray-address: applies to --executor ray" in local_with_address.stderr
    assert run_data_cli(*decon, "--executor", "ray", "--ray-address", ray_env).exit_code == 0
    assert not (tmp_path / "b.jsonl").exists()

"""The data factory on Ray (`executor: ray`) gives the local answer: on the session's 2-node Ray cluster, each
operation's output file (bytes and sha256) and report numbers equal the local run's, dedup's clusters equal local's
(so precision and recall are equal), and a worker killed mid-operation is retried by Ray with the same output."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from data_helpers import write_jsonl, write_parquet
from ray_fixtures import CLUSTER_CPUS  # noqa: E402 - the session cluster: one Ray worker per CPU
from synthetic_corpus import pairwise_scores, planted_corpus

from training_platform.data.clean import clean_file
from training_platform.data.dedup import DedupConfig, dedup_file
from training_platform.data.executors import ExecutorError, get_executor, plan_ranges, read_range
from training_platform.data.io import iter_records

pytestmark = pytest.mark.integration

RECIPE = {
    "operators": [
        {"op": "fix_unicode"},
        {"op": "normalize_whitespace"},
        {"op": "redact_pii", "kinds": ["email"]},
        {"op": "length_filter", "unit": "words", "min": 4, "max": 400},
        {"op": "repetition_filter"},
    ]
}


@pytest.fixture(scope="module")
def ray_env(ray_cluster):
    return ray_cluster.address  # the session cluster keeps Ray on loopback (tests/ray_fixtures.py)


@pytest.fixture(scope="module")
def corpus():
    return planted_corpus(1200, seed=3, min_words=20, max_words=60)


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory, corpus) -> Path:
    rows = []
    for i, text in enumerate(corpus.texts):
        if i % 97 == 5:
            text = f"  mail me at user{i}@example.com   {text}  "
        if i % 89 == 7:
            text = "short one"
        rows.append({"text": text, "id": i})
    path = tmp_path_factory.mktemp("ray-data") / "corpus.jsonl"
    write_jsonl(path, rows)
    with path.open("a") as f:  # a blank line inside the file: not a row, but it counts as a line
        f.write("\n")
    with path.open("a") as f:
        for i, text in enumerate(corpus.texts[:50]):
            f.write(json.dumps({"text": text, "id": 10_000 + i}) + "\n")
    return path


def _without_timings(report: dict) -> dict:
    return {k: v for k, v in report.items() if k not in ("timings_s", "executor", "output")}


def test_ranges_read_back_every_record_with_its_index_and_line(tmp_path, corpus_file):
    records = list(iter_records(corpus_file))
    ranges = plan_ranges(corpus_file, block_rows=97)
    assert len(ranges) > 10 and sum(r.rows for r in ranges) == len(records)
    again = [rec for rng in ranges for rec in read_range(corpus_file, rng)]
    assert [(r.index, r.line, r.row) for r in again] == [(r.index, r.line, r.row) for r in records]
    parquet = write_parquet(tmp_path / "rows.parquet", [{"text": f"row {i}"} for i in range(10)])
    assert [r.row for rng in plan_ranges(parquet) for r in read_range(parquet, rng)] == [
        r.row for r in iter_records(parquet)
    ]


def test_clean_on_ray_equals_local(tmp_path, corpus_file, ray_env):
    local = clean_file(corpus_file, tmp_path / "local.jsonl", RECIPE)
    on_ray = clean_file(
        corpus_file, tmp_path / "ray.jsonl", RECIPE, executor=get_executor("ray", address=ray_env, block_rows=150)
    )
    assert (tmp_path / "local.jsonl").read_bytes() == (tmp_path / "ray.jsonl").read_bytes()
    assert on_ray["output_sha256"] == local["output_sha256"]
    assert local["removed_rows"] > 0 and any(op["modified"] for op in local["operators"])
    assert _without_timings(on_ray) == {**_without_timings(local), "version": on_ray["version"]}
    assert on_ray["version"]["sha256"] == local["version"]["sha256"]
    assert on_ray["executor"]["name"] == "ray" and on_ray["executor"]["workers"] == CLUSTER_CPUS
    assert local["executor"] == {"name": "local", "workers": 1}


def test_dedup_on_ray_finds_the_local_clusters(tmp_path, corpus_file, corpus, ray_env):
    config = DedupConfig(threshold=0.8, num_perm=64, ngram=5)
    local = dedup_file(corpus_file, tmp_path / "local.jsonl", config)
    on_ray = dedup_file(
        corpus_file, tmp_path / "ray.jsonl", config, executor=get_executor("ray", address=ray_env, block_rows=150)
    )
    assert local["near_duplicates"] > 20 and local["exact_duplicates"] >= 50
    assert on_ray["clusters"] == local["clusters"]
    assert on_ray["cluster_details"] == local["cluster_details"]
    for key in ("input_rows", "output_rows", "exact_duplicates", "near_duplicates", "candidate_pairs"):
        assert on_ray[key] == local[key], key
    assert on_ray["verified_pairs"] == local["verified_pairs"]
    assert (tmp_path / "local.jsonl").read_bytes() == (tmp_path / "ray.jsonl").read_bytes()
    assert on_ray["version"] == {**local["version"], **{k: on_ray["version"][k] for k in ("path", "created_at")}}
    n = len(corpus.texts)
    scores = [pairwise_scores([[i for i in c if i < n] for c in r["clusters"]], corpus, n) for r in (local, on_ray)]
    assert scores[0] == scores[1] and scores[0]["recall"] >= 0.9


def test_dedup_keep_best_matches_local(tmp_path, corpus_file, ray_env):
    config = DedupConfig(num_perm=32, keep="best")
    local = dedup_file(corpus_file, tmp_path / "l.jsonl", config)
    on_ray = dedup_file(corpus_file, tmp_path / "r.jsonl", config, executor=get_executor("ray", address=ray_env))
    assert (on_ray["clusters"], on_ray["cluster_details"]) == (local["clusters"], local["cluster_details"])
    assert any(d["representative"] != d["members"][0] for d in local["cluster_details"])  # best is not first
    assert (tmp_path / "l.jsonl").read_bytes() == (tmp_path / "r.jsonl").read_bytes()


def test_a_bad_row_on_ray_is_the_local_error(tmp_path, ray_env):
    from training_platform.data.formats import DatasetError

    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps({"text": f"row number {i} here"}) + "\n" for i in range(30)) + "{oops\n")
    with pytest.raises(DatasetError) as local:
        clean_file(path, tmp_path / "o.jsonl", RECIPE)
    with pytest.raises(DatasetError) as on_ray:
        clean_file(path, tmp_path / "o.jsonl", RECIPE, executor=get_executor("ray", address=ray_env, block_rows=150))
    assert str(on_ray.value) == str(local.value) and "line 31" in str(local.value)
    assert not (tmp_path / "o.jsonl").exists()


def test_an_unreachable_cluster_is_refused_naming_the_executor():
    with pytest.raises(ExecutorError, match="^executor: the Ray cluster at 127.0.0.1:9 cannot be reached"):
        list(get_executor("ray", address="127.0.0.1:9").map_blocks(Path(__file__), len))
    with pytest.raises(ExecutorError, match="executor: unknown executor 'spark'"):
        get_executor("spark")


def test_a_worker_killed_mid_operation_is_retried_with_the_same_output(tmp_path, corpus_file, ray_env):
    """SIGKILL of the Ray worker process running a block, once: Ray retries the task; the output is identical."""
    from training_platform.data.executors.ray_data import RayExecutor

    marker = tmp_path / "killed-once"

    class KillOnce:  # defined here: cloudpickle ships it to the workers by value
        def __init__(self, stage):
            self.stage = stage

        def __call__(self, records):
            if any(r.index == 700 for r in records) and not marker.exists():
                marker.write_text(str(os.getpid()))
                os.kill(os.getpid(), signal.SIGKILL)
            return self.stage(records)

    class KillingExecutor(RayExecutor):
        def map_blocks(self, path, stage, **kw):
            return super().map_blocks(path, KillOnce(stage), **kw)

    local = clean_file(corpus_file, tmp_path / "local.jsonl", RECIPE)
    on_ray = clean_file(
        corpus_file, tmp_path / "ray.jsonl", RECIPE, executor=KillingExecutor(address=ray_env, block_rows=150)
    )
    assert marker.exists() and int(marker.read_text()) != os.getpid()  # a worker process died...
    assert on_ray["output_sha256"] == local["output_sha256"]  # ... and its block was done again
    assert (tmp_path / "local.jsonl").read_bytes() == (tmp_path / "ray.jsonl").read_bytes()


def test_tp_data_takes_the_executor(tmp_path, corpus_file, ray_env):
    from data_helpers import run_data_cli

    outputs = {}
    for executor in ("local", "ray"):
        out = tmp_path / f"{executor}.jsonl"
        extra = ["--ray-address", ray_env] if executor == "ray" else []
        result = run_data_cli(
            "dedup",
            corpus_file,
            "--output",
            out,
            "--report",
            tmp_path / f"{executor}.json",
            "--num-perm",
            "32",
            "--executor",
            executor,
            *extra,
        )
        assert result.exit_code == 0, result
        outputs[executor] = out.read_bytes()
    assert outputs["ray"] == outputs["local"]
    assert json.loads((tmp_path / "ray.json").read_text())["executor"]["name"] == "ray"
    bad = run_data_cli(
        "clean",
        corpus_file,
        "--recipe",
        _recipe_file(tmp_path),
        "--output",
        tmp_path / "c.jsonl",
        "--report",
        tmp_path / "c.json",
        "--executor",
        "ray",
        "--ray-address",
        "127.0.0.1:9",
    )
    assert bad.exit_code == 2 and "executor: the Ray cluster at 127.0.0.1:9 cannot be reached" in bad.stderr, bad
    assert (
        run_data_cli(
            "clean",
            corpus_file,
            "--recipe",
            _recipe_file(tmp_path),
            "--output",
            tmp_path / "c.jsonl",
            "--report",
            tmp_path / "c.json",
            "--executor",
            "spark",
        ).exit_code
        == 2
    )
    assert not (tmp_path / "c.jsonl").exists()


def _recipe_file(tmp_path: Path) -> Path:
    path = tmp_path / "recipe.json"
    path.write_text(json.dumps(RECIPE))
    return path


def test_a_bad_row_in_dedup_on_ray_is_the_local_error(tmp_path, ray_env):
    from training_platform.data.formats import DatasetError

    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps({"text": f"row number {i} here"}) + "\n" for i in range(30)) + "{oops\n")
    with pytest.raises(DatasetError) as local:
        dedup_file(path, tmp_path / "o.jsonl", DedupConfig(num_perm=16))
    with pytest.raises(DatasetError) as on_ray:
        dedup_file(path, tmp_path / "o.jsonl", DedupConfig(num_perm=16), executor=get_executor("ray", address=ray_env))
    assert str(on_ray.value) == str(local.value) and "line 31" in str(local.value)


@pytest.mark.unit
def test_bucket_pairs_of_a_whole_block_are_the_local_pairs_of_each_bucket():
    """The Ray dedup's vectorised stages equal the local rule bucket by bucket: members in row order, each paired with
    the bucket's first member and with its predecessor; an exact group's later rows each point at its first."""
    import numpy as np

    from training_platform.data.executors.ray_data import _bucket_pairs, _exact_groups, _split_pairs

    rng = np.random.default_rng(7)
    rows = 3000
    band = rng.integers(0, 4, rows)
    key = rng.integers(0, 400, rows).astype(np.uint64) * np.uint64(2**40)  # high bits set: keys are full uint64
    idx = rng.permutation(10 * rows)[:rows].astype(np.int64)
    expected = set()
    for b in range(4):
        for k in np.unique(key[band == b]):
            members = sorted(idx[(band == b) & (key == k)].tolist())
            for pos in range(1, len(members)):
                expected.add((members[0], members[pos]))
                expected.add((members[pos - 1], members[pos]))
    lo, hi = _split_pairs(_bucket_pairs({"band": band, "key": key, "idx": idx})["pair"])
    assert list(zip(lo.tolist(), hi.tolist(), strict=True)) == sorted(expected)
    assert len(expected) > rows // 2  # the block held many buckets of several members

    exact = rng.integers(0, 500, rows).astype(np.uint64)
    out = _exact_groups({"idx": idx, "exact": exact})
    leaders = {h: min(idx[exact == h].tolist()) for h in np.unique(exact).tolist()}
    want = sorted((i, leaders[h]) for i, h in zip(idx.tolist(), exact.tolist(), strict=True) if i != leaders[h])
    assert sorted(zip(out["idx"].tolist(), out["leader"].tolist(), strict=True)) == want
    assert _bucket_pairs({"band": band[:1], "key": key[:1], "idx": idx[:1]})["pair"].size == 0

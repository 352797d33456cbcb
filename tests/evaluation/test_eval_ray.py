"""`tp eval run --executor ray --workers N`: each benchmark's items sharded over Ray actors of the session's 2-node
local cluster (`ray_cluster`: 2 CPUs per node, loopback). Greedy runs of the tiny model score every item exactly as
the local run does, with the samples merged into one run dir in the local order; HumanEval's programs run in the
sandbox of the worker that generated them; a cluster that cannot be reached is refused naming the executor."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from eval_helpers import last_json_line, read_jsonl, run_eval_cli, write_jsonl

pytestmark = pytest.mark.integration

import ray.cluster_utils  # noqa: E402, F401 - a dependency: without it this fails, never skips
from ray_fixtures import LOOPBACK  # noqa: E402 - Ray's processes and clients stay on 127.0.0.1

TIMING_FIELDS = {"latency_s", "exec_time_s"}  # wall times: the only fields allowed to differ


def _common(model: Path, *extra: Any) -> list[str]:
    # --batch-size 2: 8 items make 4 batches, so both workers get some (whole batches, as the local run forms them)
    return [
        "--model",
        str(model),
        "--max-new-tokens",
        "8",
        "--threads",
        "1",
        "--batch-size",
        "2",
        "--no-progress",
        *map(str, extra),
    ]


def _records(run: Path, benchmark: str) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in record.items() if k not in TIMING_FIELDS}
        for record in read_jsonl(run / "samples" / f"{benchmark}.jsonl")
    ]


def _entry(summary: dict[str, Any], benchmark: str) -> dict[str, Any]:
    return {k: v for k, v in summary["benchmarks"][benchmark].items() if k != "time_s"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def cluster(ray_cluster, monkeypatch):
    """The session's cluster, joined from this process (the CLI runs in-process): Ray read LOOPBACK's variable when
    this process imported it, before the fixture set it, so its client is told here (else it swaps 127.0.0.1 for
    the machine's address, where the loopback cluster does not listen). Disconnected afterwards whatever happens."""
    import ray
    from ray._private import ray_constants

    for name, value in LOOPBACK.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
    yield ray_cluster
    if ray.is_initialized():
        ray.shutdown()


@pytest.fixture(scope="module")
def mc_file(tmp_path_factory) -> Path:
    rows = [
        {"question": f"What is {a}+{b}?", "choices": [str(a + b - 1), str(a + b), str(a + b + 1)], "answer": 1}
        for a, b in [(1, 1), (2, 3), (4, 4), (5, 2), (3, 6), (7, 1)]
    ]
    return write_jsonl(tmp_path_factory.mktemp("mc") / "mc.jsonl", rows)


def test_whole_batches_dealt_to_workers_are_batched_again_as_in_one_process(tiny_backend):
    """The shard rule behind exact greedy equality: a worker given whole batches (in item order) forms the same
    batches as the one-process run (left padding changes logits slightly, so other splits could change outputs)."""
    from training_platform.evaluation.generation import GenerationRequest, SamplingParams
    from training_platform.evaluation.ray_shards import deal

    params = SamplingParams(max_new_tokens=4)
    requests = [GenerationRequest(prompt="1+2=" * (i % 5 + 1) + str(i)) for i in range(11)]
    pairs = [(r.prompt or "", f" {c}") for r in requests for c in ("3", "no", "three")]
    cases = [
        (requests, lambda rs: tiny_backend.generation_batches(rs, params)),
        (pairs, tiny_backend.loglikelihood_batches),
    ]
    tiny_backend.batch_size = 2
    try:
        for work, batches in cases:
            whole = batches(work)
            assert len(whole) > 3 and sorted(i for batch in whole for i in batch) == list(range(len(work)))
            for worker, shard in enumerate(deal(whole, 3)):
                again = [[shard[k] for k in batch] for batch in batches([work[i] for i in shard])]
                assert again == whole[worker::3]
    finally:
        tiny_backend.batch_size = 4


def test_greedy_ray_run_scores_every_item_as_the_local_run(tmp_path, demo, mc_file, cluster):
    args = [
        "--benchmarks",
        "gsm8k,multiple_choice",
        "--data",
        f"gsm8k={demo['data'] / 'gsm8k_eval.jsonl'}",
        "--data",
        f"multiple_choice={mc_file}",
        "--limit",
        "8",
    ]
    local = run_eval_cli("run", *_common(demo["model"], *args), "--output", tmp_path / "local")
    assert local.exit_code == 0, local.stderr
    sharded = run_eval_cli(
        "run",
        *_common(demo["model"], *args),
        "--executor",
        "ray",
        "--workers",
        "2",
        "--ray-address",
        cluster.address,
        "--output",
        tmp_path / "ray",
    )
    assert sharded.exit_code == 0, sharded.stderr
    assert last_json_line(sharded.stdout) == {**last_json_line(local.stdout), "output": str(tmp_path / "ray")}

    a = json.loads((tmp_path / "local" / "summary.json").read_text())
    b = json.loads((tmp_path / "ray" / "summary.json").read_text())
    assert "executor" not in a  # the local summary is as before
    assert b["executor"]["name"] == "ray" and b["executor"]["workers"] == 2 and len(b["executor"]["nodes"]) == 2
    assert b["status"] == "completed" and b["model"] == a["model"]
    for name in ("gsm8k", "multiple_choice"):
        assert _entry(b, name) == _entry(a, name), name  # metrics, n, chat, generation settings
        local_records, ray_records = _records(tmp_path / "local", name), _records(tmp_path / "ray", name)
        assert len(ray_records) == (8 if name == "gsm8k" else 6)
        # same order (item position, then sample index), same outputs, extracted answers and scores
        assert ray_records == local_records, name
    assert sorted(p.name for p in (tmp_path / "ray" / "samples").iterdir()) == ["gsm8k.jsonl", "multiple_choice.jsonl"]
    assert (tmp_path / "ray" / "report.html").is_file()


def test_humaneval_on_ray_runs_in_the_workers_sandbox_and_scores_as_local(tmp_path, demo, cluster, sandbox_ok):
    from training_platform.evaluation.config import EvalConfig
    from training_platform.evaluation.runner import run_evaluation

    config = EvalConfig.model_validate(
        {
            "model": {"path": str(demo["model"]), "batch_size": 2, "num_threads": 1},
            "benchmarks": [{"name": "humaneval", "limit": 4, "max_new_tokens": 8, "timeout_s": 2}],
        }
    )
    local = run_evaluation(config, tmp_path / "local", progress=False)
    events: list[dict[str, Any]] = []
    sharded = run_evaluation(
        config,
        tmp_path / "ray",
        progress=False,
        on_progress=events.append,
        executor="ray",
        workers=2,
        ray_address=cluster.address,
    )
    assert _entry(sharded, "humaneval") == _entry(local, "humaneval")  # pass@1 and isolation ("bwrap") included
    assert sharded["benchmarks"]["humaneval"]["isolation"] == sandbox_ok.mechanism
    ray_records = _records(tmp_path / "ray", "humaneval")
    assert ray_records == _records(tmp_path / "local", "humaneval")
    assert [r["id"] for r in ray_records] == [f"HumanEval/{i}" for i in range(4)]
    assert all(r["isolation"] == sandbox_ok.mechanism and r["result"] for r in ray_records)
    # progress: the sums per stage (as a local run reports them) and each worker's own counts
    assert {"benchmark": "humaneval", "stage": "score", "done": 4, "total": 4} in events
    finals = {(e["worker"], e["stage"]): (e["done"], e["total"]) for e in events if "worker" in e}
    assert finals == {(w, s): (2, 2) for w in (0, 1) for s in ("generate", "score")}


def test_unreachable_cluster_bad_values_and_worker_errors(tmp_path, demo, cluster):
    data = ["--benchmarks", "gsm8k", "--data", f"gsm8k={demo['data'] / 'gsm8k_eval.jsonl'}", "--limit", "2"]
    address = f"127.0.0.1:{_free_port()}"
    result = run_eval_cli(
        "run", *_common(demo["model"], *data), "--executor", "ray", "--ray-address", address, "--output", tmp_path / "a"
    )
    assert result.exit_code == 2, result.stderr
    assert "--executor" in result.stderr and address in result.stderr and "cannot be reached" in result.stderr
    assert not (tmp_path / "a" / "summary.json").exists()

    for extra, named in (
        (["--executor", "spark"], "--executor"),
        (["--executor", "ray", "--workers", "0"], "--workers"),
        (["--executor", "ray", "--workers", "65"], "--workers"),
        (["--workers", "2"], "--workers"),  # the local executor is one worker
        (["--executor", "ray", "--workers", "5", "--ray-address", cluster.address], "--workers"),  # 4 CPUs
    ):
        result = run_eval_cli("run", *_common(demo["model"], *data, *extra), "--output", tmp_path / "b")
        assert result.exit_code == 2, (extra, result.stderr)
        assert named in result.stderr, (extra, result.stderr)

    # an error on a worker (here: loading a model dir without a model) is raised as itself, as a local run's is
    empty = tmp_path / "not-a-model"
    empty.mkdir()
    failed = {}
    for executor in ("local", "ray"):
        extra = ["--executor", executor] + (["--ray-address", cluster.address] if executor == "ray" else [])
        result = run_eval_cli("run", *_common(empty, *data, *extra), "--output", tmp_path / executor)
        failed[executor] = (result.exit_code, result.stderr.strip().splitlines()[-1])
    assert failed["ray"] == failed["local"] and failed["local"][0] != 0, failed  # same exit code, same message
    assert "RayTaskError" not in failed["ray"][1]

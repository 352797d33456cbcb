"""Training on a Ray cluster: a 2-node local cluster made here (`ray.cluster_utils.Cluster`, 2 CPUs each, a small
object store, no dashboard, loopback only) trains the same SFT job with the same losses as one process."""

from __future__ import annotations

import json
import os

import pytest
from training_helpers import EXAMPLES, train_records

pytestmark = [pytest.mark.integration, pytest.mark.slow]

import ray.cluster_utils  # noqa: E402, F401 - a dependency: without it this fails, never skips

QUIET = [
    "--set",
    "training.logging_steps=1",
    "--set",
    "training.eval_steps=null",
    "--set",
    "data.eval_file=null",
    "--set",
    "model.dtype=fp32",
    "--set",
    "resources.device=cpu",
]
from ray_fixtures import CLUSTER_CPUS, LOOPBACK  # noqa: E402 - Ray's processes and clients stay on 127.0.0.1


# One launcher, any algorithm: DPO's cross-rank equivalence is tested under torchrun (test_distributed.py), whose
# ranks run the same code as Ray Train's workers.
@pytest.mark.parametrize(("config", "engine"), [("sft_tiny.yaml", "trl"), ("sft_tiny.yaml", "verl")])
def test_two_nodes_match_one_process(tp, tmp_path, ray_cluster, config, engine):
    assert ray_cluster.address.startswith("127.0.0.1:")
    env = {**LOOPBACK, "TP_RAY_ADDRESS": ray_cluster.address}
    common = [*QUIET, "--set", "training.max_steps=4", "--set", "training.save_steps=4", "--set", f"engine={engine}"]
    one, two = tmp_path / "one", tmp_path / "two"
    tp("train", EXAMPLES / config, "--output", one, *common, "--set", "training.per_device_batch_size=8", check=0)
    tp(
        "train",
        EXAMPLES / config,
        "--output",
        two,
        *common,
        "--set",
        "training.per_device_batch_size=4",
        "--set",
        "resources.num_nodes=2",
        env_extra=env,
        check=0,
        timeout=900,
    )
    a = [(r["step"], r["loss"]) for r in train_records(one)]
    b = [(r["step"], r["loss"]) for r in train_records(two)]
    assert [s for s, _ in b] == [1, 2, 3, 4]
    assert [loss for _, loss in b] == pytest.approx([loss for _, loss in a], rel=1e-4)
    info = json.loads((two / "run.json").read_text())
    assert (info["status"], info["launcher"], info["world_size"], info["num_nodes"]) == ("succeeded", "ray", 2, 2)
    rank_1_state = "global_step_4/extra_state_world_size_2_rank_1.pt" if engine == "verl" else "rng_state_1.pth"
    assert (two / "checkpoints" / "step_000004" / rank_1_state).is_file()
    tp("verify", two, check=0)


def test_sigterm_stops_the_ray_workers_with_a_checkpoint(tp_env, tmp_path, ray_cluster):
    import signal
    import subprocess
    import time

    from training_helpers import REPO, TP, read_metrics

    run = tmp_path / "run"
    cmd = [
        *TP,
        "train",
        str(EXAMPLES / "sft_tiny.yaml"),
        "--output",
        str(run),
        *QUIET,
        "--set",
        "training.max_steps=100000",
        "--set",
        "training.save_steps=100000",
        "--set",
        "training.per_device_batch_size=4",
        "--set",
        "resources.num_nodes=2",
    ]
    env = {**tp_env, **LOOPBACK, "TP_RAY_ADDRESS": ray_cluster.address}
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 300
        while not ((run / "metrics.jsonl").exists() and len(read_metrics(run)) >= 2):
            assert proc.poll() is None and time.time() < deadline, proc.communicate()
            time.sleep(0.5)
        started = time.time()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert time.time() - started < 30, "every worker stops within 30 s"
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "stopped" and info["stop_reason"] == "SIGTERM"
    latest = (run / "checkpoints" / "latest").resolve()
    assert latest.name == f"step_{info['step']:06d}" and (latest / "rng_state_1.pth").is_file()


def test_cluster_snapshot_and_preflight_know_the_cluster(tp_env, ray_cluster):
    from training_platform.training import ray_cluster as status

    snap = status.snapshot(ray_cluster.address)
    assert "error" not in snap, snap
    assert len(snap["nodes"]) == 2 and sum(n["is_head"] for n in snap["nodes"]) == 1
    assert {n["ip"] for n in snap["nodes"]} == {"127.0.0.1"}, "the test cluster stays on loopback"
    assert snap["totals"]["CPU"] == {"total": CLUSTER_CPUS, "used": 0.0} and snap["totals"]["GPU"]["total"] == 0
    assert snap["dashboard_url"] is None  # started without a dashboard

    import yaml

    from training_platform.training.config import ConfigError
    from training_platform.training.preflight import validate_config

    base = yaml.safe_load((EXAMPLES / "sft_tiny.yaml").read_text())
    base["resources"] = {"device": "cpu", "num_nodes": 2}

    def problems(address: str, **resources) -> dict[str, str]:
        raw = {**base, "resources": {**base["resources"], **resources}}
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("TP_DATA_DIR", tp_env["TP_DATA_DIR"])
            mp.setenv("TP_RAY_ADDRESS", address)
            try:
                validate_config(raw)
            except ConfigError as exc:
                return dict(exc.errors)
        return {}

    assert problems(ray_cluster.address) == {}
    assert problems(ray_cluster.address, num_nodes=3) == {
        "resources.num_nodes": "3 nodes requested, the Ray cluster has 2 alive"
    }
    assert problems(ray_cluster.address, device="cuda") == {
        "resources.num_devices": "2 GPUs needed in all, the Ray cluster has 0"
    }
    unreachable = problems("127.0.0.1:1")
    assert unreachable["resources.launcher"].startswith("the Ray cluster (TP_RAY_ADDRESS) cannot be reached")


@pytest.mark.parametrize("restarts", [1])  # 0 (fail naming it) runs under torchrun: test_distributed.py
def test_a_killed_ray_worker_fails_the_run_naming_its_rank_or_is_restarted(tp_env, tmp_path, ray_cluster, restarts):
    import re
    import signal
    import subprocess
    import time

    from training_helpers import REPO, TP, read_metrics

    run = tmp_path / "run"
    cmd = [
        *TP,
        "train",
        str(EXAMPLES / "sft_tiny.yaml"),
        "--output",
        str(run),
        *QUIET,
        "--set",
        f"training.max_steps={100000 if restarts == 0 else 12}",
        "--set",
        "training.save_steps=2",
        "--set",
        "training.per_device_batch_size=4",
        "--set",
        "resources.num_nodes=2",
        "--set",
        f"resources.max_restarts={restarts}",
    ]
    env = {**tp_env, **LOOPBACK, "TP_RAY_ADDRESS": ray_cluster.address}
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 300
        while not ((run / "checkpoints" / "latest").exists() and len(read_metrics(run)) >= 3):
            assert proc.poll() is None and time.time() < deadline, proc.communicate()
            time.sleep(0.2)
        pid = int(re.search(r"rank 1/2 \(.*pid (\d+)\)", (run / "ranks" / "rank_1.log").read_text())[1])
        os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    info = json.loads((run / "run.json").read_text())
    if restarts == 0:
        assert proc.returncode == 1, err[-3000:]
        assert info["status"] == "failed" and "rank 1 died" in info["error"], info["error"]
    else:
        assert proc.returncode == 0, err[-3000:]
        assert info["status"] == "succeeded" and info["restarts"] == 1 and "rank 1 died" in info["last_restart_reason"]
        assert [r["step"] for r in train_records(run)] == list(range(1, 13)), "each step once across the restart"


def test_verl_rl_with_launcher_local_starts_its_own_ray_beside_a_running_cluster(tp, tmp_path, ray_cluster):
    """`launcher: local` means a private Ray for the run: not whatever cluster runs on this host (ray.init() with no
    address would join it and hold its CPUs). verl's RL on the cluster: tests/training/test_verl_rl.py."""
    run = tmp_path / "run"
    sets = {
        "engine": "verl",
        "resources.device": "cpu",
        "training.max_steps": 1,
        "training.save_steps": 1,
        "training.per_device_batch_size": 8,
        "algorithm.num_generations": 4,
    }
    args = [x for key, value in sets.items() for x in ("--set", f"{key}={value}")]
    tp("train", EXAMPLES / "grpo_tiny.yaml", "--output", run, *args, env_extra=LOOPBACK, check=0)
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "succeeded" and info["rollout"] == "hf"

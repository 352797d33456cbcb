"""engine: verl trains RL for real on this CPU: `tp train` runs verl's own driver (TaskRunner -> its sync trainer's
fit(): rollout, reward, advantage, actor and, for PPO, critic updates) on a private Ray, with the `hf` rollout
(transformers) taking the actor's weights after every update. Each run starts from a short SFT so rewards vary."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
import verl  # noqa: F401 - proves a feature: `make setup` installs verl; without it this fails, never skips
import yaml
from process_marks import marked_processes, new_mark
from training_helpers import REPO, TP, read_metrics

pytestmark = [pytest.mark.integration, pytest.mark.slow]


PROBS_DIFF = "training/rollout_probs_diff_max"


def rl_config(tmp: Path, model: Path, algorithm: dict, *, steps: int, save_steps: int, batch: int = 16) -> Path:
    """A tiny RL job: `batch` rollouts a step (16: 4 prompts x 4); a length penalty beside the answer reward makes
    rewards vary."""
    raw = {
        "engine": "verl",
        "model": {"path": str(model), "dtype": "fp32"},
        "data": {"train_file": "demo/data/rl.jsonl", "max_length": 64},
        "algorithm": {"max_completion_length": 6, "temperature": 1.0, **algorithm},
        "rewards": [
            {"name": "math_answer", "weight": 1.0},
            {"name": "length_penalty", "weight": 0.5, "params": {"max_length": 3, "buffer": 1, "unit": "tokens"}},
        ],
        "training": {
            "learning_rate": 5.0e-5,
            "max_steps": steps,
            "per_device_batch_size": batch,
            "logging_steps": 1,
            "save_steps": save_steps,
            "seed": 0,
        },
        "resources": {"device": "cpu"},
    }
    if algorithm["name"] == "ppo":  # reward functions and a critic started from the policy (verl's GAE)
        raw["algorithm"]["response_length"] = raw["algorithm"].pop("max_completion_length")
        raw["algorithm"]["num_ppo_epochs"] = 1
    path = tmp / f"{algorithm['name']}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def rows(run: Path) -> list[dict]:
    return [r for r in read_metrics(run) if "loss" in r or "grad_norm" in r]


def assert_trained(run: Path, steps: int, *, critic: bool = False) -> list[dict]:
    records = rows(run)
    assert [r["step"] for r in records] == list(range(1, steps + 1)), "each step once"
    for r in records:
        for key in ("loss", "reward", "grad_norm", "entropy", "completions/mean_length", PROBS_DIFF):
            assert key in r, (key, sorted(r))
        assert r[PROBS_DIFF] < 1e-5, "the rollout generated with the actor's current weights"
        assert "rewards/math_answer/mean" in r and "rewards/length_penalty/mean" in r
        if critic:
            assert "value_loss" in r
    assert any(r["grad_norm"] > 0 for r in records), "some step had varied rewards and moved the weights"
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "succeeded" and info.get("rollout") == "hf" and info.get("device") == "cpu"
    return records


def test_grpo_trains_through_verls_trainer_with_the_hf_rollout(tp, tmp_path, sft_start):
    import torch
    from transformers import AutoModelForCausalLM

    run = tmp_path / "grpo"
    config = rl_config(
        tmp_path, sft_start, {"name": "grpo", "num_generations": 4, "loss_type": "dapo"}, steps=3, save_steps=3
    )
    tp("train", config, "--output", run, check=0, timeout=900)
    assert_trained(run, 3)
    assert (run / "checkpoints" / "step_000003").is_dir()
    model = AutoModelForCausalLM.from_pretrained(run / "final")
    assert model.dtype == torch.float32, "final/ in the job's dtype"
    before = AutoModelForCausalLM.from_pretrained(sft_start).state_dict()
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items()), "the weights moved"
    tp("verify", run, check=0)
    kept = [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]
    assert kept and {"math_answer", "length_penalty"} <= set(kept[0]["rewards"]), kept[0]


@pytest.mark.parametrize(
    "algorithm",
    [
        {"name": "grpo", "num_generations": 4, "loss_type": "grpo"},
        {"name": "grpo", "num_generations": 4, "loss_type": "dr_grpo", "scale_rewards": "none"},
        {"name": "grpo", "num_generations": 4, "importance_sampling_level": "sequence"},  # GSPO
        {"name": "rloo", "num_generations": 4, "beta": 0.05},  # KL in the reward: a reference model
        {"name": "reinforce_pp", "num_generations": 4, "beta": 0.001},
        {"name": "reinforce_pp", "num_generations": 4, "baseline": True},
        # PPO (GAE with a critic): on the cluster below, with its reward model beside a reward function
    ],
    ids=["grpo", "dr_grpo", "gspo", "rloo", "reinforce_pp", "reinforce_pp_baseline"],
)
def test_each_rl_algorithm_trains_under_verl(tp, tmp_path, sft_start, algorithm):
    run = tmp_path / "run"
    # 3 steps of 8 prompts: a step costs ~1-2 s beside verl's ~60 s start. The SFT start often answers a prompt the
    # same way 4 times (no advantage in that group): 4 prompts x 2 steps once gave no gradient at all (GSPO).
    config = rl_config(tmp_path, sft_start, algorithm, steps=3, save_steps=3, batch=32)
    tp("train", config, "--output", run, check=0, timeout=900)
    records = assert_trained(run, 3, critic=algorithm["name"] == "ppo")
    if algorithm.get("beta"):
        assert any("kl" in r or "actor/reward_kl_penalty" in r for r in records), sorted(records[0])
    assert (run / "final" / "config.json").is_file()


def test_sigterm_mid_run_stops_everything_and_resume_logs_each_step_once(tp, tp_env, tmp_path, sft_start):
    run = tmp_path / "run"
    config = rl_config(tmp_path, sft_start, {"name": "grpo", "num_generations": 4}, steps=5, save_steps=1)
    mark = new_mark()  # in every process of this run, Ray's included
    proc = subprocess.Popen(
        [*TP, "train", str(config), "--output", str(run)],
        env={**tp_env, **mark},
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 600
        while time.time() < deadline and proc.poll() is None:
            if (run / "checkpoints" / "step_000002").is_dir():
                break
            time.sleep(0.5)
        assert proc.poll() is None, proc.communicate()
        stop_sent = time.time()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert time.time() - stop_sent < 30, "the driver and its actors stop within 30 s"
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "stopped", info
    time.sleep(2)
    left = marked_processes(mark)
    assert not left, [p.cmdline()[:3] for p in left]

    tp("train", config, "--resume", run, check=0, timeout=900)
    steps = [r["step"] for r in rows(run)]
    assert steps == [1, 2, 3, 4, 5], "every step once: none lost, none twice"
    assert json.loads((run / "run.json").read_text())["status"] == "succeeded"


# ---- verl's RL on the session's 2-node Ray cluster (ray_fixtures: CPU nodes of 2 CPUs each, as a plain `ray start`
# gives on this machine; no logical GPUs): verl's workers take one-CPU bundles, one rank on each node.

VERL_ACTORS = ("WorkerDict", "TaskRunnerV1", "HFRolloutServer", "RewardModelServer", "AgentLoopWorker")


def on_cluster(path: Path, *, num_nodes: int = 2) -> Path:
    raw = yaml.safe_load(path.read_text())
    raw["resources"].update(launcher="ray", num_nodes=num_nodes, num_devices=1)
    raw["training"]["per_device_batch_size"] = 16 // num_nodes if num_nodes != 3 else 8
    path.write_text(yaml.safe_dump(raw))
    return path


def cluster_env(cluster) -> dict[str, str]:
    from ray_fixtures import LOOPBACK

    return {**LOOPBACK, "TP_RAY_ADDRESS": cluster.address}


def start_train(config: Path, run: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [*TP, "train", str(config), "--output", str(run)],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def workers_by_node(run: Path) -> dict[str, list[str]]:
    """node id -> the verl actors run.json says ran there."""
    out: dict[str, list[str]] = {}
    for w in json.loads((run / "run.json").read_text())["workers"]:
        out.setdefault(w["node_id"], []).append(w["actor"])
    return out


def live_verl_actors(address: str) -> list[str]:
    import ray
    from ray._private.state import actors

    ray.init(address=address, logging_level="ERROR", log_to_driver=False, configure_logging=False)
    try:
        return sorted(
            a["ActorClassName"].rsplit(".", 1)[-1]
            for a in actors().values()
            if a["State"] == "ALIVE" and a["ActorClassName"].rsplit(".", 1)[-1] in VERL_ACTORS
        )
    finally:
        ray.shutdown()


def test_grpo_on_a_two_node_cluster_puts_a_rank_on_each_node_stops_and_resumes(
    tp, tp_env, tmp_path, sft_start, ray_cluster
):
    from ray_fixtures import CLUSTER_CPUS, free_cpus, wait_until

    run = tmp_path / "run"
    config = on_cluster(rl_config(tmp_path, sft_start, {"name": "grpo", "num_generations": 4}, steps=4, save_steps=1))
    proc = start_train(config, run, {**tp_env, **cluster_env(ray_cluster)})
    try:
        wait_until(lambda: (run / "checkpoints" / "step_000002").is_dir() or proc.poll() is not None, 600, "step 2")
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "stopped" and info["launcher"] == "ray", info
    nodes = {n["NodeID"] for n in _alive_nodes(ray_cluster.address)}
    placed = workers_by_node(run)
    ranks = {node for node, kinds in placed.items() if "WorkerDict" in kinds}
    assert len(ranks) == 2 and ranks <= nodes, f"a torch rank on each node: {placed}"
    wait_until(lambda: free_cpus(ray_cluster.address) == CLUSTER_CPUS, 30, "the run's bundles to free", 0.5)
    assert live_verl_actors(ray_cluster.address) == [], "no actor of the run survives the stop"

    tp("train", config, "--resume", run, env_extra=cluster_env(ray_cluster), check=0, timeout=900)
    records = assert_trained(run, 4)
    placed = workers_by_node(run)
    assert len({node for node, kinds in placed.items() if "WorkerDict" in kinds}) == 2, f"again on both: {placed}"
    assert json.loads((run / "run.json").read_text())["attempts"] == 2
    assert records[-1]["step"] == 4


def _alive_nodes(address: str) -> list[dict]:
    import ray

    ray.init(address=address, logging_level="ERROR", log_to_driver=False, configure_logging=False)
    try:
        return [n for n in ray.nodes() if n["Alive"]]
    finally:
        ray.shutdown()


def test_ppo_with_a_critic_and_the_served_reward_model_trains_on_the_cluster(
    tp, tmp_path, sft_start, data_dir, ray_cluster
):
    """configs/examples/ppo_tiny.yaml under verl: the learned reward model (served by the platform, engines/verl/
    reward_server.py) scores every rollout beside a reward function; GAE with a critic; one rank on each node."""
    raw = yaml.safe_load((Path(REPO) / "configs" / "examples" / "ppo_tiny.yaml").read_text())
    raw.update(engine="verl", rewards=[{"name": "math_answer", "weight": 1.0}])
    raw["model"] = {"path": str(sft_start), "dtype": "fp32"}
    raw["algorithm"]["reward_model_path"] = str(data_dir / "demo" / "reward_model")
    raw["algorithm"]["num_ppo_epochs"] = 1
    raw["training"].update(max_steps=3, save_steps=3, seed=0)
    raw["resources"] = {"device": "cpu"}
    config = tmp_path / "ppo_rm.yaml"
    config.write_text(yaml.safe_dump(raw))
    on_cluster(config)
    run = tmp_path / "run"
    tp("train", config, "--output", run, env_extra=cluster_env(ray_cluster), check=0, timeout=900)
    records = rows(run)
    assert [r["step"] for r in records] == [1, 2, 3], "each step once"
    for r in records:
        assert "value_loss" in r and "rewards/reward_model/mean" in r and "rewards/math_answer/mean" in r, sorted(r)
        assert r[PROBS_DIFF] < 1e-5
    assert any(r["rewards/reward_model/std"] > 0 for r in records), "the reward model scores rollouts differently"
    kept = [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]
    assert kept and {"reward_model", "math_answer"} <= set(kept[0]["rewards"]), kept[0]
    placed = workers_by_node(run)
    assert sum("WorkerDict" in kinds for kinds in placed.values()) == 2, placed
    assert any("RewardModelServer" in kinds for kinds in placed.values()), placed
    assert json.loads((run / "run.json").read_text())["status"] == "succeeded"


def test_a_node_killed_mid_run_fails_the_run_naming_it(tp_env, tmp_path, sft_start, ray_cluster):
    """A third node joins the session cluster for a 3-node run, then dies mid-run (its raylet and workers killed):
    the run fails within a minute, naming that node."""
    from ray_fixtures import NODE_CPUS, wait_until

    node = ray_cluster.add_node(num_cpus=NODE_CPUS, object_store_memory=120 * 2**20, node_ip_address="127.0.0.1")
    try:
        ray_cluster.wait_for_nodes()
        run = tmp_path / "run"
        config = rl_config(tmp_path, sft_start, {"name": "grpo", "num_generations": 4}, steps=10_000, save_steps=1000)
        on_cluster(config, num_nodes=3)
        proc = start_train(config, run, {**tp_env, **cluster_env(ray_cluster)})
        try:
            wait_until(
                lambda: rows(run) if (run / "metrics.jsonl").is_file() else proc.poll() is not None, 600, "a step"
            )
            assert proc.poll() is None, proc.communicate()
            dead = node.node_id
            assert dead in workers_by_node(run), "the job placed a rank on the third node"
            ray_cluster.remove_node(node)
            node = None
            _, err = proc.communicate(timeout=180)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 1, err[-3000:]
        info = json.loads((run / "run.json").read_text())
        assert info["status"] == "failed" and "died mid-run" in info["error"], info["error"]
        assert f"node id {dead[:12]}" in info["error"], "the error names the node that died"
    finally:
        if node is not None:
            ray_cluster.remove_node(node)

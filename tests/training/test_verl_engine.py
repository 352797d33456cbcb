"""engine: verl - the generated verl config (composed offline from verl's own Hydra defaults) for every algorithm,
our mapping of the job's fields into it, and the checks verl's `validate_config` does not make."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from training_platform.training.config import ConfigError
from training_platform.training.preflight import validate_config

pytestmark = pytest.mark.unit

pytest.importorskip("verl")

from training_platform.training.engines.verl import engine, mapping  # noqa: E402
from training_platform.training.runner import dry_run  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "configs" / "examples"
RL = {
    "model": {"path": "demo/model"},
    "data": {"train_file": "demo/data/rl.jsonl", "max_length": 64},
    "algorithm": {"name": "grpo", "num_generations": 4, "max_completion_length": 8},
    "rewards": [{"name": "math_answer"}],
    "training": {"max_steps": 5, "per_device_batch_size": 8},
    "resources": {"device": "cpu"},
    "engine": "verl",
}


@pytest.fixture(scope="module", autouse=True)
def demo(tmp_path_factory):
    from training_platform.demo import prepare_demo

    root = tmp_path_factory.mktemp("tp_verl")
    prepare_demo(root)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TP_DATA_DIR", str(root))
        mp.delenv("TP_RAY_ADDRESS", raising=False)
        yield root


def job(**changes: Any) -> dict:
    raw = copy.deepcopy(RL)
    for key, value in changes.items():
        *parents, leaf = key.split("__")
        node = raw
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return raw


def generated(raw: dict):
    from omegaconf import OmegaConf

    cfg = validate_config(raw, dry_run=True)
    config = engine.verl_config(cfg, engine.planned_paths(cfg, Path("/runs/r1")))
    return lambda key: OmegaConf.select(config, key)


def errors_of(raw: dict, *, dry: bool = True) -> dict[str, str]:
    with pytest.raises(ConfigError) as caught:
        validate_config(raw, dry_run=dry)
    return {e.path: e.reason for e in caught.value.errors}


@pytest.mark.parametrize("name", ["sft", "grpo", "rloo", "ppo", "reinforce_pp"])
def test_each_example_dry_runs_under_verl_with_verls_own_validation(name):
    """The example of every verl algorithm generates a config that our checks and verl's validate_config accept."""
    import yaml

    raw = yaml.safe_load((EXAMPLES / f"{name}_tiny.yaml").read_text())
    raw["engine"] = "verl"
    text = dry_run(raw)
    effective, _, verl_yaml = text.partition("# verl_config.yaml")
    assert "engine: verl" in effective and verl_yaml
    assert "<run_dir>/verl/train.parquet" in verl_yaml  # paths planned under the run directory
    if name == "ppo":  # its reward model is served by the platform and asked by the generated reward module
        assert "<run_dir>/verl/reward_fn.py" in verl_yaml


def test_grpo_fields_map_onto_verl_keys():
    get = generated(
        job(
            algorithm__loss_type="dr_grpo",
            algorithm__epsilon_high=0.28,
            algorithm__beta=0.04,
            algorithm__scale_rewards="none",
            training__learning_rate=3e-6,
        )
    )
    assert get("algorithm.adv_estimator") == "grpo" and get("actor_rollout_ref.rollout.n") == 4
    assert get("data.train_batch_size") == 2, "8 completions per step / 4 per prompt = 2 prompts"
    assert get("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu") == 8
    assert get("actor_rollout_ref.actor.loss_agg_mode") == "seq-mean-token-sum-norm"
    clip = (get("actor_rollout_ref.actor.clip_ratio_low"), get("actor_rollout_ref.actor.clip_ratio_high"))
    assert clip == (0.2, 0.28)
    assert get("actor_rollout_ref.actor.use_kl_loss") is True and get("actor_rollout_ref.actor.kl_loss_coef") == 0.04
    assert get("algorithm.norm_adv_by_std_in_grpo") is False
    assert get("actor_rollout_ref.actor.optim.lr") == 3e-6 and get("trainer.total_training_steps") == 5
    assert get("data.max_prompt_length") == 56 and get("data.max_response_length") == 8
    assert get("actor_rollout_ref.model.path").endswith("demo/model")
    assert get("reward.custom_reward_function.path") == "/runs/r1/verl/reward_fn.py"
    assert get("trainer.default_local_dir") == "/runs/r1/verl/checkpoints"
    assert get("trainer.device") == "cpu" and get("trainer.n_gpus_per_node") == 1
    gspo = generated(job(algorithm__importance_sampling_level="sequence"))
    assert gspo("actor_rollout_ref.actor.policy_loss.loss_mode") == "gspo"


def test_rloo_ppo_and_reinforce_pp_pick_their_estimators():
    assert (
        generated(job(algorithm={"name": "rloo", "num_generations": 4, "max_completion_length": 8}))(
            "algorithm.adv_estimator"
        )
        == "rloo"
    )
    ppo = generated(
        job(algorithm={"name": "ppo", "gamma": 0.99, "lam": 0.9, "kl_coef": 0.0}, rewards=[{"name": "math_answer"}])
    )
    assert (ppo("algorithm.adv_estimator"), ppo("algorithm.gamma"), ppo("algorithm.lam")) == ("gae", 0.99, 0.9)
    assert ppo("critic.model.path").endswith("demo/model") and ppo("actor_rollout_ref.rollout.n") == 1
    plain = generated(job(algorithm={"name": "reinforce_pp", "max_completion_length": 8}))
    assert plain("algorithm.adv_estimator") == "reinforce_plus_plus" and plain("actor_rollout_ref.rollout.n") == 1
    assert plain("actor_rollout_ref.actor.kl_loss_type") == "mse"
    base = generated(
        job(algorithm={"name": "reinforce_pp", "baseline": True, "num_generations": 4, "max_completion_length": 8})
    )
    assert base("algorithm.adv_estimator") == "reinforce_plus_plus_baseline"


def test_sft_maps_batch_precision_and_cpu_settings():
    import yaml

    raw = yaml.safe_load((EXAMPLES / "sft_tiny.yaml").read_text())
    raw.update(engine="verl", resources={"device": "cpu", "num_devices": 2})
    raw["model"]["dtype"] = "fp32"
    get = generated(raw)
    assert get("data.train_batch_size") == 2 * raw["training"]["per_device_batch_size"]
    assert get("engine.strategy") == "fsdp2" and get("engine.model_dtype") == "fp32"
    assert get("engine.mixed_precision") == {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
    assert get("model.override_config") == {"attn_implementation": "sdpa"}
    raw["resources"] = {"device": "auto"}  # what this machine has: no CUDA here
    assert generated(raw)("trainer.device") == "cpu"


# ---------------------------------------------------------------------------------------------- what verl lets through


@pytest.mark.parametrize(
    ("override", "value", "reason"),
    [
        ("algorithm.adv_estimator", "grpo_typo", "unknown advantage estimator 'grpo_typo'; verl has: gae"),
        ("actor_rollout_ref.actor.policy_loss.loss_mode", "nope", "unknown policy loss 'nope'; verl has: bypass_mode"),
        ("actor_rollout_ref.actor.clip_ratio_low", -0.1, "a clip ratio must be a number >= 0, got -0.1"),
        ("algorithm.gamma", "0.99", "must be a number like verl's default (1.0), got '0.99'"),
        ("actor_rollout_ref.rollout.n", 1, "grpo compares the rollouts of each prompt: needs n >= 2"),
        ("actor_rollout_ref.rollout.name", "nope", "unknown rollout engine 'nope'; verl's RL rollouts run on hf"),
        ("trainer.no_such_key", 1, "verl's ppo_trainer config has no key 'trainer.no_such_key'"),
        ("actor_rollout_ref.actor", 1, "is a section of verl's config"),
    ],
)
def test_what_verls_validation_misses_is_a_clear_error(override, value, reason):
    errors = errors_of(job(verl={"overrides": {override: value}}))
    field = f"verl.overrides.{override}"
    assert field in errors and errors[field].startswith(reason), errors


@pytest.mark.parametrize(
    ("override", "value", "kind"),
    [
        ("actor_rollout_ref.model.path", "/data/users/bob/model", "names a file or directory"),
        ("data.train_files", "/data/users/bob/train.parquet", "names a file or directory"),
        ("trainer.default_local_dir", "/data/users/bob/runs", "names a file or directory"),
        ("custom_cls.path", "/tmp/evil.py", "names code verl imports"),
        ("reward.custom_reward_function.path", "/tmp/evil.py", "names code verl imports"),
        ("actor_rollout_ref.model.external_lib", "evil", "names code verl imports"),
        ("actor_rollout_ref.model.trust_remote_code", True, "names code verl imports"),
        ("actor_rollout_ref.rollout.multi_turn.tool_config_path", "/tmp/tools.yaml", "names code verl imports"),
        ("trainer.logger", ["wandb"], "names code verl imports, the cluster it joins or where it sends metrics"),
    ],
)
def test_overrides_naming_code_paths_or_trackers_are_refused(override, value, kind):
    """A hostile user's override cannot make verl import their code, read or write another user's files, join
    another cluster or send metrics out: refused when the config is read (a 422 at submission)."""
    errors = errors_of(job(verl={"overrides": {override: value, "algorithm.gamma": 0.9}}))
    assert errors["verl.overrides"].startswith(f"{override}: {kind}"), errors


def test_our_fields_are_named_when_the_mapping_produced_the_bad_value():
    swapped = generated(job(verl={"overrides": {"algorithm.adv_estimator": "grpo_passk"}, "rollout": "hf"}))
    assert swapped("algorithm.adv_estimator") == "grpo_passk" and swapped("actor_rollout_ref.rollout.name") == "hf"
    errors = errors_of(job(algorithm__max_completion_length=64))  # prompt budget 0: verl would start and crash
    assert errors["data.max_length"].startswith("leaves no room for the prompt")


def test_verl_options_belong_to_engine_verl_and_reinforce_pp_to_verl():
    errors = errors_of(job(engine="trl", verl={"rollout": "sglang"}))
    assert errors["verl"].startswith("options of engine: verl")
    errors = errors_of(job(engine="trl", algorithm={"name": "reinforce_pp", "max_completion_length": 8}))
    assert errors["engine"] == "engine 'trl' cannot train reinforce_pp; use 'verl'"
    errors = errors_of(job(algorithm={"name": "dpo"}, rewards=[]))
    assert errors["engine"] == "engine 'verl' cannot train dpo; use 'trl'"
    with pytest.raises(ConfigError) as caught:
        validate_config(job(resources={"device": "mps"}), check_disk=False)
    assert ("resources.device", "engine verl runs on cuda or cpu, not mps") in caught.value.errors


def test_verl_rl_starts_on_the_cpu_with_the_hf_rollout_and_refuses_gpu_rollouts_naming_verl_rollout():
    validate_config(job(), dry_run=False)  # auto picks hf: nothing stops a CPU start
    get = generated(job())
    assert get("actor_rollout_ref.rollout.name") == "hf" and get("actor_rollout_ref.rollout.calculate_log_probs")
    assert get("actor_rollout_ref.actor.strategy") == "fsdp2" and get("trainer.v1.trainer_mode") == "sync"
    assert get("actor_rollout_ref.model.override_config") == {"attn_implementation": "sdpa"}
    for name in ("vllm", "sglang"):
        for dry in (True, False):
            errors = errors_of(job(verl={"rollout": name}), dry=dry)
            assert list(errors) == ["verl.rollout"] and name in errors["verl.rollout"], errors
    errors = errors_of(job(resources={"device": "cuda"}), dry=False)
    assert "resources.device" in errors, errors


def test_docs_print_the_mapping_table():
    docs = (Path(__file__).resolve().parents[2] / "docs" / "engines.md").read_text()
    assert mapping.table_markdown() in docs, "docs/engines.md: paste mapping.table_markdown() (see its header)"


# ---------------------------------------------------------------------------------------------- RL inputs


def test_rl_inputs_are_verls_parquet_and_our_rewards_score_the_same(tmp_path):
    """The prompts in verl's schema (the data factory's converter) and the generated custom_reward_function: verl's
    call gives the weighted sum of our reward functions, as TRL's would, with each function's value."""
    import importlib.util

    import pyarrow.parquet as pq

    from training_platform.training.rewards import build_reward_function
    from training_platform.training.rundir import RunDir

    raw = job(
        rewards=[
            {"name": "math_answer", "weight": 3.0},
            {"name": "length_penalty", "weight": 1.0, "params": {"max_length": 4, "buffer": 2}},
        ]
    )
    loaded: dict = {}
    cfg = validate_config(raw, loaded=loaded, dry_run=True)
    run = RunDir(tmp_path / "run")
    run.create()
    engine.prepare_rl_inputs(cfg, run, loaded)
    rows = pq.read_table(tmp_path / "run" / "verl" / "train.parquet").to_pylist()
    assert len(rows) == len(loaded["data.train_file"][0])
    first = rows[0]
    assert first["prompt"][0]["role"] == "user" and first["reward_model"]["ground_truth"] == "13"
    assert {"data_source", "ability", "extra_info"} <= set(first)
    manifest = (tmp_path / "run" / "manifest.jsonl").read_text()
    assert "verl/train.parquet" in manifest and "verl/reward_fn.py" in manifest

    spec = importlib.util.spec_from_file_location("reward_fn", tmp_path / "run" / "verl" / "reward_fn.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    math_answer = build_reward_function("math_answer", {})
    length = build_reward_function("length_penalty", {"max_length": 4, "buffer": 2})
    for completion in ("13", "The answer is 13 because 0 plus 13 is 13", "12"):
        got = module.compute_score(
            first["data_source"], completion, first["reward_model"]["ground_truth"], first["extra_info"]
        )
        ours = [f(prompts=[first["prompt"]], completions=[completion], answer=["13"])[0] for f in (math_answer, length)]
        assert got["rewards/math_answer"] == ours[0] and got["rewards/length_penalty"] == ours[1]
        assert got["score"] == pytest.approx(0.75 * ours[0] + 0.25 * ours[1])


def test_rows_verl_cannot_train_on_are_refused_before_anything_starts(demo):
    (demo / "plain.jsonl").write_text('{"text": "1+1=2"}\n{"text": "2+2=4"}\n')
    errors = errors_of({**job(algorithm={"name": "sft"}, rewards=[]), "data": {"train_file": "plain.jsonl"}})
    assert errors["data.train_file"].startswith("engine verl trains SFT on conversations (messages) or prompt")
    (demo / "no_answer.jsonl").write_text('{"prompt": "1+1="}\n{"prompt": "2+2="}\n')
    errors = errors_of(
        job(
            data={"train_file": "no_answer.jsonl", "max_length": 64},
            rewards=[{"name": "length_penalty", "params": {"max_length": 4}}],
        )
    )
    assert errors["data.train_file"].startswith("verl's RL rows need a reference answer")


def test_verl_rl_on_a_ray_cluster_is_checked_against_its_cpu_nodes():
    """Preflight's rule for verl's CPU placement on a cluster (checks.cluster_cpu_problems): each node holds its
    `num_devices` one-CPU bundles."""
    from training_platform.training.engines.verl.checks import cluster_cpu_problems

    def nodes(*cpus):
        return [{"resources": {"CPU": {"total": float(c), "used": 0.0}}} for c in cpus]

    assert cluster_cpu_problems(2, 1, nodes(2, 2)) == [], "a plain `ray start` on two 2-core machines"
    (error,) = cluster_cpu_problems(3, 1, nodes(2, 2))
    assert error.path == "resources.num_nodes" and "2 alive" in error.reason
    (error,) = cluster_cpu_problems(2, 2, nodes(4, 1))
    assert error.path == "resources.num_devices" and "the largest has 4" in error.reason
    assert cluster_cpu_problems(2, 1, nodes(1, 1)) == [], "verl's other actors hold no CPU"


def test_verl_rl_declares_the_ray_launcher_and_several_local_workers():
    from training_platform.training.engines import require_builder

    for algorithm in ("grpo", "rloo", "ppo", "reinforce_pp"):
        assert require_builder("verl", algorithm).capabilities.launchers == ("local", "ray")
    cfg = validate_config(job(resources__num_devices=2, resources__launcher="local"), dry_run=True)
    assert cfg.resources.processes == 2, "verl starts its own 2 workers on a private Ray"


def test_max_restarts_is_not_silently_ignored_by_verls_rl():
    from training_platform.training.engines.verl.engine_checks import VerlChecks

    cfg = validate_config(job(resources__max_restarts=2), dry_run=True)
    (warning,) = [w for w in VerlChecks().warnings(cfg) if w.startswith("resources.max_restarts")]
    assert "tp train --resume" in warning

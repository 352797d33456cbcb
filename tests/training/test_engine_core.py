"""The engine-neutral core: the (engine, algorithm) registry, RunWriter, StopSignal, and the import boundaries
(algorithms and the runner import no engine)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from training_platform.training.config import ConfigError, parse_config
from training_platform.training.engines import capability_table, get_builder, register_builder
from training_platform.training.preflight import validate_config
from training_platform.training.run_writer import RunWriter
from training_platform.training.rundir import RunDir, verify
from training_platform.training.stop_signal import StopSignal

pytestmark = pytest.mark.unit


def test_every_algorithm_has_a_builder_and_the_table_shows_its_capabilities():
    from training_platform.training.algorithms import ALGORITHMS

    rows = {(r["engine"], r["algorithm"]): r for r in capability_table()}
    verl_only = {"reinforce_pp"}  # TRL cannot express REINFORCE++
    assert {("trl", name) for name in ALGORITHMS if name not in verl_only} <= set(rows)
    assert {("verl", name) for name in ("sft", "grpo", "rloo", "ppo", "reinforce_pp")} <= set(rows)
    assert not any(engine == "trl" and name in verl_only for engine, name in rows)
    assert rows[("trl", "ppo")]["resume"] is False and rows[("trl", "sft")]["resume"] is True
    assert rows[("trl", "reward")]["model_kinds"] == ["sequence_classification"]
    assert all(set(r["launchers"]) <= {"local", "torchrun", "ray"} for r in rows.values())


def test_registering_twice_or_an_unknown_launcher_is_an_error():
    with pytest.raises(ValueError, match="already registered"):
        register_builder("trl", "sft")(lambda ctx: None)
    with pytest.raises(ValueError, match="unknown launcher"):
        register_builder("trl", "x", launchers=("mpi",))


def test_an_engine_without_a_builder_for_the_algorithm_is_refused_naming_engine():
    from training_platform.training import engines

    raw = {"model": {"path": "demo/model"}, "data": {"train_file": "demo/data/sft.jsonl"}, "algorithm": {"name": "sft"}}
    registry = engines.builders()
    saved = dict(registry)  # restored in its order: messages list the registry's algorithms in registration order
    del registry[("trl", "sft")]
    try:
        with pytest.raises(ConfigError) as err:
            validate_config(raw, check_disk=False)
    finally:
        registry.clear()
        registry.update(saved)
    assert [e.path for e in err.value.errors] == ["engine"]
    assert "cannot train sft" in err.value.errors[0].reason
    with pytest.raises(ConfigError) as err:
        parse_config({**raw, "engine": "megatron"})
    assert err.value.errors[0].path == "engine"


def test_engine_specific_rules_are_builder_capabilities_not_names_in_shared_code():
    trl_ppo, verl_ppo = get_builder("trl", "ppo"), get_builder("verl", "ppo")
    assert trl_ppo is not None and verl_ppo is not None
    assert trl_ppo.capabilities.requires_reward_model and not verl_ppo.capabilities.requires_reward_model
    assert verl_ppo.capabilities.reward_functions_without_reward_model
    assert "mps" not in verl_ppo.capabilities.devices and "mps" in trl_ppo.capabilities.devices
    assert not trl_ppo.capabilities.sampling and get_builder("trl", "grpo").capabilities.sampling


def test_an_algorithms_own_check_reads_a_narrow_context_not_the_job_config():
    from dataclasses import replace

    from training_platform.training.algorithms import ppo
    from training_platform.training.algorithms.base import CheckContext

    ctx = CheckContext(
        engine="x",
        requires_reward_model=True,
        data_format="auto",
        max_length=64,
        has_eval=False,
        per_device_batch_size=8,
        per_device_eval_batch_size=8,
        gradient_accumulation_steps=1,
        world_size=1,
        quantization="none",
    )
    params = ppo.Params(name="ppo")
    assert params.check(ctx) == [("algorithm.reward_model_path", "engine x's PPO needs a reward model")]
    assert params.check(replace(ctx, requires_reward_model=False)) == []
    assert params.check(replace(ctx, requires_reward_model=False, quantization="4bit")) == [
        ("model.lora.quantization", "QLoRA is not supported with PPO")
    ]


def test_the_trl_engine_asks_the_builders_hooks_never_the_algorithm_name():
    from training_platform.training.engines.trl import engine
    from training_platform.training.engines.trl.builders import PPOHooks

    assert isinstance(get_builder("trl", "ppo").hooks, PPOHooks)
    assert get_builder("trl", "sft").hooks is None
    source = Path(engine.__file__).read_text(encoding="utf-8")
    assert '"ppo"' not in source and "ppo." not in source


def test_no_import_cycle_is_excused_for_type_checking():
    root = Path(__file__).resolve().parents[2]
    assert "exclude_type_checking_imports" not in (root / ".importlinter").read_text(encoding="utf-8")


def test_algorithms_config_and_runner_import_no_engine():
    code = (
        "import sys, training_platform.training.runner, training_platform.training.config; "
        "from training_platform.training.engines import capability_table; capability_table(); "
        "print([m for m in ('torch', 'transformers', 'trl', 'accelerate') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------------------------------------- RunWriter


def _saved(tmp_path: Path, step: int, size: int = 1000) -> Path:
    d = tmp_path / "engine_out" / f"checkpoint-{step}"
    d.mkdir(parents=True)
    (d / "model.safetensors").write_bytes(bytes([step % 256]) * size)
    (d / "optimizer.pt").write_bytes(b"o" * size)
    return d


def test_run_writer_records_checkpoints_in_the_background_and_rotates(tmp_path):
    run = RunDir(tmp_path / "run")
    run.create()
    writer = RunWriter(run, keep_last=2)
    for step in (10, 20, 30):
        target = writer.checkpoint_saved(step, _saved(tmp_path, step))
        assert target == run.checkpoints / f"step_{step:06d}" and run.latest_checkpoint() == target
        writer.log_metrics({"step": step, "loss": 1.0 / step})
    writer.close()
    assert [p.name for p in run.checkpoint_dirs()] == ["step_000020", "step_000030"]
    manifest = run.manifest()
    assert [e["path"] for e in manifest if e["kind"] == "removed"] == ["checkpoints/step_000010"]
    assert {e["path"] for e in manifest if e["kind"] == "checkpoint"} == {
        f"checkpoints/step_{s:06d}/{f}" for s in (10, 20, 30) for f in ("model.safetensors", "optimizer.pt")
    }
    assert verify(run.path) == (4, [])
    assert [r["step"] for r in run.read_metrics()] == [10, 20, 30]
    assert run.read_run_info()["last_checkpoint"] == "step_000030"


def test_only_rank_zero_writes(tmp_path):
    run = RunDir(tmp_path / "run")
    run.create()
    other = RunWriter(run, rank=1)
    saved = _saved(tmp_path, 5)
    other.log_metrics({"step": 5, "loss": 1.0})
    assert other.checkpoint_saved(5, saved) is None
    other.update_run_info(step=5)
    other.close()
    assert saved.is_dir() and not run.metrics_file.exists() and not run.manifest_file.exists()
    assert run.read_run_info() == {} and run.checkpoint_dirs() == []


def test_a_failed_background_hash_is_raised_by_flush(tmp_path, monkeypatch):
    run = RunDir(tmp_path / "run")
    run.create()
    writer = RunWriter(run)

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(run, "record_tree", broken)
    writer.checkpoint_saved(1, _saved(tmp_path, 1))
    with pytest.raises(RuntimeError, match="disk full"):
        writer.flush()
    writer.close()


def test_hashing_does_not_block_the_caller(tmp_path, monkeypatch):
    run = RunDir(tmp_path / "run")
    run.create()
    writer = RunWriter(run)
    release = threading.Event()
    original = run.record_tree

    def slow(*args, **kwargs):
        release.wait(10)
        return original(*args, **kwargs)

    monkeypatch.setattr(run, "record_tree", slow)
    writer.checkpoint_saved(1, _saved(tmp_path, 1))  # returns while the hash waits
    assert not run.manifest_file.exists()
    release.set()
    writer.close()
    assert [json.loads(line)["kind"] for line in run.manifest_file.read_text().splitlines()] == ["checkpoint"] * 2


# ---------------------------------------------------------------------------------------------- StopSignal


def test_stop_signal_sources(tmp_path):
    stop_file = tmp_path / "STOP"
    signal = StopSignal(stop_file, stop_at_step=5)
    assert signal.poll(1) is None
    stop_file.touch()
    assert signal.poll(2) == "STOP file" and signal.stopped == "STOP file"
    assert StopSignal(None, stop_at_step=5).poll(5) == "stop at step 5"
    asked = StopSignal(None)
    asked.request_stop("SIGTERM")
    assert asked.poll(3) == "SIGTERM"


def test_stop_is_agreed_by_every_rank(tmp_path):
    """Two ranks sharing an `agree` (any over both flags, as the all-reduce does): a stop seen by one rank stops
    both after the same step; a request that arrives during the agreement counts at the next step, on both."""
    flags: dict[int, bool] = {}
    barrier = threading.Barrier(2)

    def agree_for(rank: int):
        def agree(flag: bool) -> bool:
            flags[rank] = flag
            barrier.wait()
            result = any(flags.values())
            barrier.wait()
            return result

        return agree

    signals = [StopSignal(None, agree=agree_for(r)) for r in (0, 1)]
    stopped_at: dict[int, int] = {}

    def run_rank(rank: int) -> None:
        for step in range(1, 10):
            if rank == 1 and step == 4:
                signals[1].request_stop("SIGTERM")
            if signals[rank].poll(step) is not None:
                stopped_at[rank] = step
                return

    threads = [threading.Thread(target=run_rank, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert stopped_at == {0: 4, 1: 4}
    assert signals[1].stopped == "SIGTERM" and signals[0].stopped == "stop requested on another rank"


def test_get_builder_is_keyed_by_engine_and_algorithm():
    assert get_builder("trl", "grpo").algorithm == "grpo"
    assert get_builder("verl", "grpo").algorithm == "grpo" and get_builder("verl", "dpo") is None


# ---------------------------------------------------------------------------------------------- resources


def _sft(**resources) -> dict:
    return {
        "model": {"path": "demo/model"},
        "data": {"train_file": "demo/data/sft.jsonl"},
        "algorithm": {"name": "sft"},
        "resources": resources,
    }


def _rule_errors(raw: dict) -> dict[str, str]:
    try:
        validate_config(raw, check_disk=False)
    except ConfigError as exc:
        return {e.path: e.reason for e in exc.errors}
    return {}


def test_launcher_auto_resolves_and_the_effective_config_records_it():
    from training_platform.training.config import effective_config

    for resources, launcher, world in (
        ({}, "local", 1),
        ({"num_devices": 2}, "torchrun", 2),
        ({"num_devices": 2, "device": "cpu"}, "torchrun", 2),
    ):
        cfg = validate_config(_sft(**resources), check_disk=False)
        effective = effective_config(cfg)["resources"]
        assert (effective["launcher"], effective["world_size"], effective["num_nodes"]) == (launcher, world, 1)
        assert validate_config(effective_config(cfg), check_disk=False).resources.processes == world


def test_resource_rules_name_the_field(monkeypatch):
    monkeypatch.delenv("TP_RAY_ADDRESS", raising=False)
    assert (
        "must equal num_nodes x num_devices (2)"
        in _rule_errors(_sft(num_devices=2, world_size=4))["resources.world_size"]
    )
    assert "one process" in _rule_errors(_sft(device="mps", num_devices=2))["resources.num_devices"]
    assert "local runs one process" in _rule_errors(_sft(launcher="local", num_devices=2))["resources.launcher"]
    assert "needs ray" in _rule_errors(_sft(launcher="torchrun", num_nodes=2))["resources.launcher"]
    assert "set TP_RAY_ADDRESS" in _rule_errors(_sft(num_nodes=2))["resources.launcher"]
    assert "set TP_RAY_ADDRESS" in _rule_errors(_sft(launcher="ray"))["resources.launcher"]
    monkeypatch.setenv("TP_RAY_ADDRESS", "127.0.0.1:6379")
    assert _rule_errors(_sft(launcher="ray")) == {}
    assert _rule_errors(_sft(num_nodes=2)) == {}  # auto -> ray
    grpo = {
        "model": {"path": "demo/model"},
        "data": {"train_file": "demo/data/rl.jsonl"},
        "algorithm": {"name": "grpo"},
        "rewards": [{"name": "math_answer"}],
        "resources": {"num_nodes": 2},
    }
    assert _rule_errors(grpo)["resources.launcher"] == "trl grpo runs under local, torchrun, not ray"
    kto = {
        "model": {"path": "demo/model"},
        "data": {"train_file": "demo/data/kto.jsonl"},
        "algorithm": {"name": "kto"},
        "resources": {"num_devices": 2},
    }
    assert _rule_errors(kto)["resources.launcher"] == "trl kto runs under local, not torchrun"
    assert _rule_errors(_sft(num_devices=2, device="cpu")) == {}  # several CPU processes are allowed (gloo)


def test_a_second_sigterm_after_the_stop_does_not_kill_the_run_while_it_records_it(tmp_path):
    """A dying worker's pool process and its PDEATHSIG each send SIGTERM: the second, arriving after training
    stopped, must not end the process before run.json and the console say it stopped."""
    import subprocess
    import sys

    code = f"""
import os, signal
from training_platform.training.runner import _stop_on_signals
from training_platform.training.stop_signal import StopSignal
stop = StopSignal({str(tmp_path / "STOP")!r})
with _stop_on_signals(stop):
    os.kill(os.getpid(), signal.SIGTERM)
assert stop.reason == "SIGTERM"
os.kill(os.getpid(), signal.SIGTERM)
print("recorded the stop")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "recorded the stop" in done.stdout, done.stderr

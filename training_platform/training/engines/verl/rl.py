"""verl RL (grpo, rloo, ppo, reinforce_pp): verl's PPO driver on Ray, with our run directory around it.

verl's TaskRunner starts its own Ray actors (FSDP actor/critic/ref, vLLM or SGLang rollout replicas), so the runner
calls this once, in its own process, whatever the launcher: `local` starts a Ray on this machine, `ray` joins the
cluster of TP_RAY_ADDRESS (the run directory must be on storage every node sees, as for every Ray job). While the
driver runs, this process follows what verl writes and keeps the run layout true:
- metrics: verl's file logger writes `verl/metrics.attempt<N>.jsonl` (one file per attempt: the logger truncates
  its file when it opens it); each new row is renamed (metrics.py) into metrics.jsonl, a step only once, so a
  resumed attempt that repeats a step adds nothing twice;
- checkpoints: once verl records `global_step_N` in latest_checkpointed_iteration.txt (after every actor shard is
  written), it becomes `checkpoints/step_NNNNNN/global_step_N` through the RunWriter (hashed, rotated);
- rollouts: verl dumps every rollout of a step to `verl/rollouts/<step>.jsonl` (`trainer.rollout_data_dir`); a
  sample of each becomes rows of rollouts.jsonl (training/rollouts.py) and the dump is removed;
- stop and cancel: the platform's stop (STOP file, SIGTERM, stop_at_step) kills the TaskRunner actor; Ray then
  kills the actors and placement groups it owns. The run resumes from its last checkpoint;
- final/: verl's model merger turns the last checkpoint's actor shards into an HF model; it writes bf16, so the
  model is cast back to the job's dtype (`final_precision` in run.json says what the values carry).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from training_platform.core.paths import data_dir
from training_platform.core.settings import current_settings
from training_platform.training.engines.verl.checks import EXTRA_CPUS
from training_platform.training.engines.verl.metrics import rename
from training_platform.training.rollouts import RolloutWriter, rollout_row

if TYPE_CHECKING:  # pragma: no cover
    from omegaconf import DictConfig

    from training_platform.training.engines.verl.mapping import VerlPaths

log = logging.getLogger("training_platform.train")

LATEST_FILE = "latest_checkpointed_iteration.txt"
KILL_WAIT_S = 30.0  # the driver and its actors are gone within this after a stop
POLL_S = 1.0


def attempt_log(run_path: Path, attempt: int) -> Path:
    return run_path / "verl" / f"metrics.attempt{attempt}.jsonl"


class LogFollower:
    """verl's file logger of one attempt -> rows of metrics.jsonl (our names), each step once, in order."""

    def __init__(self, source: Path, writer, *, after_step: int):
        self.source = source
        self.writer = writer
        self.last_step = after_step
        self._offset = 0

    def poll(self) -> int:
        """Append the rows verl has written since the last poll; returns how many were new."""
        try:
            with self.source.open("rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return 0
        end = chunk.rfind(b"\n")
        if end < 0:  # no complete line yet
            return 0
        self._offset += end + 1
        written = 0
        for line in chunk[: end + 1].splitlines():
            if not line.strip():
                continue
            entry = json.loads(line)
            step = int(entry["step"])
            if step <= self.last_step:  # logged by an earlier attempt (or verl's own re-log)
                continue
            data = dict(entry.get("data") or {})
            record: dict[str, Any] = {"step": step}
            epoch = data.pop("training/epoch", None)
            if epoch is not None:
                record["epoch"] = epoch
            record["ts"] = round(time.time(), 3)
            record.update(rename(data))
            self.writer.log_metrics(record)
            self.last_step = step
            written += 1
        return written


def verl_rollout_row(entry: dict[str, Any], step: int) -> dict[str, Any]:
    """One row of verl's rollout dump (`{"input", "output", "gts", "score", "step", <reward extras>...}`, written by
        its trainer's `_write_generations`) -> a rollouts.jsonl row. `score` is the total reward (the sum of the
        token-level scores: our weighted reward functions, or the reward model); our reward module's per-function values
        (`rewards/<name>`) are in the dump only when verl passes reward extras to it (its v0 trainer; v1 dumps the total
        alone: `rewards` is then {}). verl does not dump advantages. An agent episode's turns and counts come from our
    trainer's dump columns (`agent_turns`, `agent/tool_calls`, `agent/tool_errors`)."""
    rewards = {key.removeprefix("rewards/"): value for key, value in entry.items() if key.startswith("rewards/")}
    turns = entry.get("agent_turns")  # an agent episode (trainer.py's dump columns)
    return rollout_row(
        step,
        entry.get("input"),
        entry.get("output"),
        rewards,
        entry.get("score"),
        None,
        turns=turns if isinstance(turns, list) else None,
        tool_calls=entry.get("agent/tool_calls"),
        tool_errors=entry.get("agent/tool_errors"),
    )


class RolloutDumps:
    """verl's `trainer.rollout_data_dir` -> rollouts.jsonl. verl writes `<step>.jsonl` (every rollout of the step) on
    one background thread, one file after the other: a dump is complete once a later one exists, or once the driver
    ended (`poll(final=True)`, which also takes the complete lines of a dump cut short by a stop). Each dump is
    removed once converted, so the run does not keep every rollout twice."""

    def __init__(self, directory: Path, rollouts: RolloutWriter, *, after_step: int):
        self.directory = directory
        self.rollouts = rollouts
        self.last_step = after_step

    def clear(self) -> None:
        """Dumps an earlier attempt left behind (verl writes the steps after the resumed checkpoint again)."""
        shutil.rmtree(self.directory, ignore_errors=True)

    def poll(self, *, final: bool = False) -> int:
        """Convert every complete dump; returns how many rows were kept."""
        try:
            steps = sorted(int(p.stem) for p in self.directory.glob("*.jsonl") if p.stem.isdigit())
        except FileNotFoundError:
            return 0
        kept = 0
        for step in steps if final else steps[:-1]:
            dump = self.directory / f"{step}.jsonl"
            if step > self.last_step:
                rows = []
                with dump.open("rb") as f:
                    for line in f:
                        if line.endswith(b"\n") and line.strip():
                            rows.append(verl_rollout_row(json.loads(line), step))
                kept += self.rollouts.write_step(step, rows)
                self.last_step = step
            dump.unlink(missing_ok=True)
        return kept


class CheckpointWatcher:
    """verl's `default_local_dir/global_step_N` -> `checkpoints/step_NNNNNN` once verl recorded it as complete."""

    def __init__(self, local_dir: Path, writer, *, after_step: int):
        self.local_dir = local_dir
        self.writer = writer
        self.last_step = after_step

    def poll(self, up_to: int | None = None) -> int | None:
        """Register every checkpoint verl finished since the last poll, up to step `up_to` (the last step whose
        metrics row was merged: a checkpoint is only a resume point once its step is in metrics.jsonl, else a stop
        between verl's save and its log line would lose that step's row); returns the newest step registered."""
        try:
            latest = int((self.local_dir / LATEST_FILE).read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        done = sorted(
            int(p.name.rsplit("_", 1)[1])
            for p in self.local_dir.glob("global_step_*")
            if p.name.rsplit("_", 1)[1].isdigit()
        )
        newest = None
        for step in done:
            if self.last_step < step <= latest and (up_to is None or step <= up_to):
                staging = self.local_dir / f"step_{step}"
                staging.mkdir(exist_ok=True)
                (self.local_dir / f"global_step_{step}").rename(staging / f"global_step_{step}")
                self.writer.checkpoint_saved(step, staging)
                self.last_step = newest = step
        return newest

    def drop_unregistered(self) -> None:
        """Remove verl's checkpoints that were not registered (a stop came before their step was logged)."""
        for path in self.local_dir.glob("global_step_*"):
            step = path.name.rsplit("_", 1)[1]
            if step.isdigit() and int(step) > self.last_step:
                shutil.rmtree(path, ignore_errors=True)


def merge_final(actor_dir: Path, final: Path, *, dtype: str, trust_remote_code: bool = False) -> str:
    """verl's model merger over one FSDP actor checkpoint -> `final` as an HF model in `dtype`
    ("fp32" | "bf16" | "fp16" | "auto": the checkpoint's config). Returns the dtype written. The merger rounds
    every weight to bf16 first, so an fp32 final/ carries bf16 values (run.json says so)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from verl.model_merger.base_model_merger import ModelMergerConfig
    from verl.model_merger.fsdp_model_merger import FSDPModelMerger

    merged = final.parent / f".{final.name}.merged"
    shutil.rmtree(merged, ignore_errors=True)
    merger = FSDPModelMerger(
        ModelMergerConfig(
            operation="merge",
            backend="fsdp",
            local_dir=str(actor_dir),
            target_dir=str(merged),
            hf_model_config_path=str(actor_dir / "huggingface"),
            trust_remote_code=trust_remote_code,
        )
    )
    merger.merge_and_save()
    merger.cleanup()
    hf_dtype = getattr(
        AutoConfig.from_pretrained(actor_dir / "huggingface", trust_remote_code=trust_remote_code), "torch_dtype", None
    )
    target = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}.get(dtype, hf_dtype)
    if isinstance(target, str):
        target = getattr(torch, target)
    target = target or torch.float32
    model = AutoModelForCausalLM.from_pretrained(merged, dtype=target, trust_remote_code=trust_remote_code)
    tmp = final.parent / f".{final.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    for name in os.listdir(merged):  # the tokenizer and generation config the merger copied
        if not (tmp / name).exists() and not name.endswith(".safetensors"):
            shutil.copy2(merged / name, tmp / name)
    shutil.rmtree(merged)
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    return str(target).removeprefix("torch.")


def _task_runner(config):
    """The TaskRunner class verl's own `main_ppo` would use for this config."""
    if config.trainer.get("use_v1", True):
        from verl.trainer.main_ppo import TaskRunnerV1

        return TaskRunnerV1
    from verl.trainer.main_ppo_v0 import TaskRunner

    return TaskRunner


class VerlActorFailed(RuntimeError):
    """A crash inside one of verl's Ray actors: the message names the actor method that raised and its error; the
    whole chain of Ray tracebacks stays on the exception (`__cause__`), so error.json and the failure bundle keep it."""


def actor_failure(exc: BaseException) -> VerlActorFailed | None:
    """verl's nested RayTaskErrors (TaskRunner -> worker group -> ...) -> the innermost actor call and its error."""
    from ray.exceptions import RayTaskError

    calls, cause = [], exc
    while isinstance(cause, RayTaskError):
        # Ray's re-raised errors keep the call only in their text: "ray::WorkerDict.actor_update() (pid=...)".
        named = re.search(r"ray::([\w.<>]+)\(", re.sub(r"\x1b\[[0-9;]*m", "", str(cause)))
        calls.append(named.group(1) if named else str(cause.__dict__.get("function_name") or "?"))
        inner = getattr(cause, "cause", None)
        if inner is None or inner is cause:
            break
        cause = inner
    if not calls:
        return None
    if isinstance(cause, RayTaskError):  # no cause object: the last line of Ray's traceback text is the error
        lines = [line for line in str(cause).splitlines() if line.strip()]
        error = lines[-1].strip() if lines else type(cause).__name__
    else:
        error = f"{type(cause).__name__}: {cause}"
    path = " -> ".join(calls)
    return VerlActorFailed(f"verl actor {calls[-1]} failed: {error[:2000]} (call chain: {path})")


# verl's actors, by class, that placement() reports (the rest are TransferQueue's and Ray's own).
PLACED_ACTORS = (
    "WorkerDict",
    "HFRolloutServer",
    "RewardModelServer",
    "TaskRunnerV1",
    "TaskRunner",
    "AgentLoopWorker",
    "RewardLoopWorker",
)
PLACEMENT_EVERY_S = 5.0
NODE_DEATH_WAIT_S = 45.0  # Ray marks a node dead after its missed health checks (~30 s by default)


def placement() -> list[dict[str, Any]]:
    """Where this Ray job's verl actors run: [{actor, name, node_id, node_ip, pid}], WorkerDict (the FSDP actor /
    critic / reference ranks: torch processes) first. Read from the GCS in the driver process."""
    import ray
    from ray._private.state import actors

    job = ray.get_runtime_context().get_job_id()
    out = []
    # this job's live actors only (a shared cluster holds many jobs'), asked of the GCS by job and state
    for entry in actors(job_id=ray.JobID.from_hex(job), actor_state_name="ALIVE").values():
        if entry.get("JobID") != job:
            continue
        cls = str(entry.get("ActorClassName", "")).rsplit(".", 1)[-1]
        if cls not in PLACED_ACTORS:
            continue
        address = entry.get("Address") or {}
        out.append(
            {
                "actor": cls,
                "name": entry.get("Name") or "",
                "node_id": address.get("NodeID", ""),
                "node_ip": address.get("IPAddress", ""),
                "pid": entry.get("Pid"),
            }
        )
    out.sort(key=lambda w: (PLACED_ACTORS.index(w["actor"]), w["name"], w["node_id"]))
    return out


class VerlNodeLost(RuntimeError):
    """A Ray node that held this run's verl actors died mid-run."""

    def __init__(self, lost: list[dict[str, Any]]):
        nodes = sorted({(w["node_ip"], w["node_id"]) for w in lost})
        names = ", ".join(f"{ip} (node id {node_id[:12]})" for ip, node_id in nodes)
        actors = ", ".join(sorted({w["name"] or w["actor"] for w in lost}))
        super().__init__(
            f"Ray node {names} died mid-run: the verl actors on it ({actors}) are gone; the run resumes from its "
            "last checkpoint with `tp train --resume` once the cluster has the nodes again"
        )
        self.lost = lost


def lost_nodes(placed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The placed actors whose node Ray now reports dead."""
    if not placed:
        return []
    import ray

    alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
    return [w for w in placed if w["node_id"] and w["node_id"] not in alive]


def wait_lost_nodes(placed: list[dict[str, Any]], wait_s: float = NODE_DEATH_WAIT_S) -> list[dict[str, Any]]:
    """After a failure: the placed actors whose node died, waiting up to `wait_s` for the cluster to mark the node
    dead (an actor's death is seen before its node's missed health checks) while any placed actor is gone."""
    deadline = time.monotonic() + wait_s
    while True:
        lost = lost_nodes(placed)
        if lost or time.monotonic() > deadline:
            return lost
        alive = {(w["actor"], w["name"], w["pid"]) for w in placement()}
        if all((w["actor"], w["name"], w["pid"]) in alive for w in placed):
            return []  # every actor still lives: an error of verl's, not a lost node
        time.sleep(1.0)


def ray_init_args(config, *, address: str | None) -> dict[str, Any]:
    """Resources of a Ray this process starts itself (no address). On the CPU each of verl's worker processes takes a
    bundle of one Ray CPU (the CPU platform's resource); the rest (task runner, TransferQueue, agent-loop and reward
    workers, rollout and reward model servers) hold none. No logical GPUs. With real GPUs, or when joining a
    cluster, Ray counts the hardware as usual."""
    if address is not None or config.trainer.device != "cpu":
        return {}
    world = int(config.trainer.n_gpus_per_node) * int(config.trainer.nnodes)
    return {"num_cpus": world + EXTRA_CPUS, "object_store_memory": 512 << 20, "include_dashboard": False}


def run_driver(
    config,
    *,
    address: str | None,
    env: dict[str, str],
    should_stop: Callable[[], str | None],
    on_tick: Callable[[], None],
    on_placement: Callable[[list[dict[str, Any]]], None] | None = None,
    reward_model: str | None = None,
) -> str | None:
    """verl's run_ppo, with a stop: returns None when training finished, or the stop reason after the driver and
    its actors were killed. `on_tick()` runs about every second while verl trains (and once at the end), then
    `should_stop()` answers the stop reason or None. A crash in one of verl's actors is raised as VerlActorFailed
    naming that actor's call and its error (Ray's tracebacks chained under it); when a node that held the run's
    workers died, the error names the node. `on_placement(workers)` gets where verl's actors run (`placement`)
    whenever that changes. `reward_model`: a model directory the platform serves for the reward module
    (reward_server.py), started before verl's TaskRunner under the name `env` gives it."""
    import ray
    from omegaconf import OmegaConf
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    from training_platform.training.engines.verl import plugin

    env = {**env, "VERL_USE_EXTERNAL_MODULES": plugin.MODULE}  # every verl process registers our plugin
    runtime_env = OmegaConf.to_container(
        OmegaConf.merge(get_ppo_ray_runtime_env(config), {"env_vars": env}), resolve=True
    )
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    log.info("verl driver: %s", f"joining the Ray cluster at {address}" if address else "starting a local Ray")
    ray.init(
        address=address or "local",  # "local": a new private Ray, never a cluster that happens to run on this host
        runtime_env=runtime_env,
        logging_level=logging.WARNING,
        log_to_driver=True,
        configure_logging=False,
        **ray_init_args(config, address=address),
    )
    for sig, handler in handlers.items():  # ray.init exits on SIGTERM; ours turns it into a stop
        with contextlib.suppress(ValueError, TypeError):
            signal.signal(sig, handler)
    placed: list[dict[str, Any]] = []
    next_look = 0.0
    served_reward_model = None

    def look() -> None:
        """Record where verl's actors run; a node of theirs that died fails the run now (its ranks' collectives
        would otherwise wait on the dead peer for gloo's timeout)."""
        nonlocal placed, next_look
        if time.monotonic() < next_look:
            return
        next_look = time.monotonic() + PLACEMENT_EVERY_S
        lost = lost_nodes(placed)
        if lost:
            raise VerlNodeLost(lost)
        now = placement()
        if now and now != placed:
            placed = now
            if on_placement is not None:
                on_placement(now)

    try:
        if reward_model is not None:
            from training_platform.training.engines.verl import reward_server

            name = env[reward_server.ACTOR_ENV]
            # held for the whole run: Ray kills an actor once its owner drops the last handle to it
            served_reward_model = reward_server.start(reward_model, device=str(config.trainer.device), name=name)
        runner = _task_runner(config).remote()
        done = runner.run.remote(config)
        while True:
            ready, _ = ray.wait([done], timeout=POLL_S)
            on_tick()
            look()
            if ready:
                try:
                    ray.get(done)
                except Exception as exc:
                    lost = wait_lost_nodes(placed)
                    if lost:
                        raise VerlNodeLost(lost) from exc
                    failure = actor_failure(exc)
                    if failure is None:
                        raise
                    raise failure from exc
                del served_reward_model
                return None
            reason = should_stop()
            if reason is not None:
                log.warning("stop (%s): killing verl's driver and its actors", reason)
                ray.kill(runner, no_restart=True)
                with contextlib.suppress(Exception):  # it dies with an ActorDiedError: that is the stop
                    ray.get(done, timeout=KILL_WAIT_S)
                on_tick()  # a checkpoint verl finished just before the kill is still registered
                return reason
    finally:
        with contextlib.suppress(Exception):
            ray.shutdown()


def train_rl(cfg, run, paths: VerlPaths, config: DictConfig, *, resume_from: Path | None, stop, writer):
    """Run verl's PPO driver on `config` (generated for `paths`, whose inputs engine.py has written) and follow it."""
    from omegaconf import OmegaConf

    from training_platform.training.engines.base import EngineResult
    from training_platform.training.engines.verl import generate

    after = 0
    if resume_from is not None:
        after = int(resume_from.name.rsplit("_", 1)[-1])
        OmegaConf.update(config, "trainer.resume_mode", "resume_path")
        OmegaConf.update(config, "trainer.resume_from_path", str(resume_from / f"global_step_{after}"))
    (run.path / "verl_config.yaml").write_text(generate.to_yaml(config))
    run.record("verl_config", run.path / "verl_config.yaml")

    attempt = int(run.read_run_info().get("attempts", 1))
    source = attempt_log(run.path, attempt)
    source.unlink(missing_ok=True)
    follower = LogFollower(source, writer, after_step=after)
    watcher = CheckpointWatcher(Path(paths.local_dir), writer, after_step=after)
    dumps = None
    if paths.rollout_dir and cfg.training.rollout_samples_per_step:
        dumps = RolloutDumps(Path(paths.rollout_dir), RolloutWriter.for_job(cfg, run), after_step=after)
        dumps.clear()
    # verl's actors import the reward module (which imports training_platform) on any node: the platform's image
    env = {"VERL_FILE_LOGGER_PATH": str(source), "TP_DATA_DIR": str(data_dir())}
    if cfg.agent is not None:  # the sandbox's settings, the endpoints and their keys the tools need (values unlogged)
        from training_platform.training.engines.verl.agent.tools import runtime_env_vars

        env.update(runtime_env_vars(cfg.agent))
    if paths.reward_model is not None:
        from training_platform.training.engines.verl import reward_server

        env[reward_server.ACTOR_ENV] = reward_server.actor_name()
    address = current_settings().ray_address if cfg.resources.resolved_launcher == "ray" else None
    writer.update_run_info(
        device=str(config.trainer.device),
        rollout=str(config.actor_rollout_ref.rollout.name),
        verl_version=generate.verl_version(),
    )

    def tick() -> None:
        follower.poll()
        watcher.poll(up_to=follower.last_step)
        if dumps is not None:
            dumps.poll()

    def placed(workers: list[dict[str, Any]]) -> None:
        writer.update_run_info(workers=workers)
        nodes = sorted({w["node_ip"] + "/" + w["node_id"][:8] for w in workers if w["actor"] == "WorkerDict"})
        log.info("verl workers: %d torch ranks on nodes %s", sum(w["actor"] == "WorkerDict" for w in workers), nodes)

    stopped = run_driver(
        config,
        address=address,
        env=env,
        on_tick=tick,
        should_stop=lambda: stop.poll(follower.last_step),  # stop_at_step: the last logged step
        on_placement=placed,
        reward_model=paths.reward_model,
    )
    if dumps is not None:
        dumps.poll(final=True)  # the driver ended: its last dump is complete (or cut short by the stop)
    if stopped is not None:  # checkpoints verl saved past the last logged step are no resume point: drop them
        watcher.drop_unregistered()
    step = max(follower.last_step, watcher.last_step)
    if stopped is None:
        latest = run.latest_checkpoint()
        if latest is None:
            raise RuntimeError("verl finished without a checkpoint: training.save_steps must be > 0 for final/")
        at = int(latest.name.rsplit("_", 1)[-1])
        written = merge_final(
            latest / f"global_step_{at}" / "actor",
            run.final,
            dtype=cfg.model.dtype,
            trust_remote_code=cfg.model.trust_remote_code,
        )
        writer.record_tree("final", run.final)
        writer.update_run_info(final_dtype=written, final_precision="bf16 (verl's model merger)")
        log.info("final model merged from %s: %s", latest.name, run.final)
    return EngineResult(step=step, stopped=stopped, summary={})

"""Run a training job end to end: validate, lay out the run directory, train, record, and fail loudly.

Used by `tp train` and (next) by the platform's workers. Exit-code contract of the CLI built on it:
0 = finished or stopped on request (run.json says which), 1 = the run failed (error.json + failpack.tgz),
2 = the config is invalid (nothing was started).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import sys
import traceback
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from training_platform.core.errors import PlatformError
from training_platform.core.paths import resolve_data_path, runs_dir
from training_platform.core.settings import current_settings
from training_platform.core.timeutil import now_iso
from training_platform.training.config import (
    ConfigError,
    FieldError,
    apply_overrides,
    effective_config,
)
from training_platform.training.distributed import DistContext
from training_platform.training.engines import engine_checks, get_engine, require_builder
from training_platform.training.preflight import validate_config
from training_platform.training.run_writer import RunWriter
from training_platform.training.rundir import RunDir, environment_info, redact, redact_record
from training_platform.training.stop_signal import StopSignal, TrainingStopped

log = logging.getLogger("training_platform.train")

# Changing these between a run and its resume still continues the same run.
RESUMABLE_CHANGES = {"training.max_steps", "training.num_epochs"}


class TrainingFailed(PlatformError):
    """The run started and failed: its error, traceback and failure bundle are in `run_dir` (error.json,
    failpack.tgz)."""

    code = "training_failed"

    def __init__(self, message: str, run_dir: Path):
        super().__init__(message)
        self.run_dir = run_dir


@dataclass
class RunResult:
    run_dir: Path
    status: str  # succeeded | stopped
    step: int
    stop_reason: str | None = None


def new_run_id(algorithm: str) -> str:
    return f"{algorithm}-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def _flatten(d: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _resume_differences(old: dict, new: dict) -> list[FieldError]:
    """What changed since the run's effective config. A field added to the schema since then counts as its
    default there (a run from an older version still resumes when the new field is left at its default)."""
    from training_platform.training.config import effective_config, parse_config

    with suppress(ConfigError):  # a field since removed or renamed: compare as recorded
        old = effective_config(parse_config(old))
    a, b = _flatten(old), _flatten(new)
    return [
        FieldError(k, f"differs from the run being resumed ({a.get(k)!r} there, {b.get(k)!r} now)")
        for k in sorted(set(a) | set(b))
        if a.get(k) != b.get(k) and k not in RESUMABLE_CHANGES
    ]


@contextmanager
def _log_to(run: RunDir):
    handler = logging.FileHandler(run.log_file, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(redact_record)
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    for noisy in ("httpx", "urllib3", "filelock", "fsspec"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    logging.captureWarnings(True)
    try:
        yield
    finally:
        logging.captureWarnings(False)
        root.removeHandler(handler)
        root.setLevel(old_level)
        handler.close()


@contextmanager
def _stop_on_signals(stopper: StopSignal):
    """First Ctrl-C / SIGTERM: finish the step, checkpoint, stop. A second Ctrl-C interrupts at once.

    Once a stop was requested, later SIGTERMs stay ignored after the block: a worker that dies sends one from its
    pool process and another through PDEATHSIG, and the second must not kill the run while it records that it
    stopped (hashing the last checkpoint, run.json, the "continue with" line)."""
    previous = {}

    def handler(signum, frame):
        if stopper.reason is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        stopper.request_stop(signal.Signals(signum).name)

    for sig in (signal.SIGINT, signal.SIGTERM):
        with suppress(ValueError):  # not the main thread: the STOP file still works
            previous[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            if sig == signal.SIGTERM and stopper.reason is not None:
                signal.signal(sig, lambda signum, frame: log.warning("SIGTERM again: already stopping"))
            else:
                signal.signal(sig, old)


class RankFailed(PlatformError):
    """A rank of a multi-process run failed (the message names it)."""

    code = "rank_failed"


def _train_ranks(
    cfg,
    submitted: dict,
    run: RunDir,
    launcher: str,
    resume_from: Path | None,
    stopper: StopSignal,
    stop_at_step: int | None,
) -> tuple[int | None, str | None, dict]:
    """Hand the run to the launcher's ranks; restart them from the last checkpoint after a rank failure when
    `resources.max_restarts` allows (metric rows after that checkpoint dropped first: no step appears twice)."""
    import shutil

    from training_platform.training.launchers import ray_train, torchrun
    from training_platform.training.rundir import LAUNCH_FILE, RESULT_FILE, ranks_dir

    restarts = 0
    can_resume = require_builder(cfg.engine, cfg.spec.name).capabilities.resume
    while True:
        shutil.rmtree(ranks_dir(run), ignore_errors=True)  # the last attempt's errors and result
        ranks_dir(run).mkdir()
        (ranks_dir(run) / LAUNCH_FILE).write_text(
            json.dumps(
                {
                    "config": submitted,
                    "resume_from": str(resume_from) if resume_from else None,
                    "stop_at_step": stop_at_step,
                }
            )
        )
        if launcher == "ray":
            address = current_settings().ray_address
            assert address, "validation refuses launcher ray without TP_RAY_ADDRESS"
            outcome = ray_train.launch(run, cfg=cfg, address=address, stop=stopper)
            if outcome.returncode == 2:  # the cluster cannot run it: a clear error, not worth a restart
                raise RankFailed(outcome.message)
        else:
            outcome = torchrun.launch(run, nproc=cfg.resources.num_devices, stop=stopper)
        if outcome.ok:
            result = json.loads((ranks_dir(run) / RESULT_FILE).read_text())
            # The ranks saw the STOP file; the reason is what reached the driver (SIGTERM, Ctrl-C, ...).
            stopped = (stopper.reason or result["stopped"]) if result["stopped"] else None
            return result["step"], stopped, result["summary"]
        latest = run.latest_checkpoint()
        if stopper.reason is None and restarts < cfg.resources.max_restarts and can_resume and latest is not None:
            restarts += 1
            step = int(latest.name.rsplit("_", 1)[-1])
            dropped = run.truncate_metrics_after(step)
            run.truncate_rollouts_after(step)
            log.warning(
                "%s: restarting every rank from %s (restart %d of %d; %d metric lines after it dropped)",
                outcome.message,
                latest.name,
                restarts,
                cfg.resources.max_restarts,
                dropped,
            )
            run.update_run_info(restarts=restarts, last_restart_reason=redact(outcome.message))
            resume_from = latest
            continue
        raise RankFailed(outcome.message)


def dry_run(raw_config: dict, *, overrides: list[str] | None = None, output: str | Path | None = None) -> str:
    """Validate every layer and return what would run, as YAML: the effective config and what the engine plans
    from it (verl: its generated config). Starts nothing and writes nothing. Raises ConfigError."""
    import yaml

    submitted = apply_overrides(raw_config, list(overrides or []))
    loaded: dict = {}
    cfg = validate_config(submitted, dry_run=True, loaded=loaded)
    text = "# config_effective.yaml\n" + yaml.safe_dump(effective_config(cfg), sort_keys=False)
    if "memory" in loaded:  # the preflight's estimate (training/memory.py), checked against this node's device
        text += "# memory estimate (peak per device)\n" + yaml.safe_dump({"memory": loaded["memory"]}, sort_keys=False)
    elif "memory_warning" in loaded:
        text += f"# memory estimate: {loaded['memory_warning']}\n"
    return text + engine_checks(cfg.engine).plan(cfg, Path(output) if output is not None else None)


def train(
    raw_config: dict,
    *,
    overrides: list[str] | None = None,
    output: str | Path | None = None,
    resume: str | Path | None = None,
    stop_at_step: int | None = None,
) -> RunResult:
    """Validate and run one training job. Raises ConfigError (nothing started) or TrainingFailed (run recorded)."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # started as one of several ranks by an outside torchrun
        raise ConfigError(
            [
                FieldError(
                    "resources.launcher",
                    "tp train starts its own processes: run it once (not "
                    "under torchrun) with resources.num_devices / num_nodes",
                )
            ]
        )
    overrides = list(overrides or [])
    loaded: dict = {}
    submitted = apply_overrides(raw_config, overrides)
    cfg = validate_config(submitted, loaded=loaded)
    from training_platform.training import gate_check

    gate_files = gate_check.enforce(cfg, resolve_data_path(cfg.data.train_file))  # data.gate: before anything
    effective = effective_config(cfg)
    launcher = cfg.resources.resolved_launcher

    resume_from: Path | None = None
    if resume is not None:
        run = RunDir(resume)
        if not (run.path / "config_effective.yaml").is_file():
            raise ConfigError([FieldError("--resume", f"{run.path} is not a run directory")])
        if not require_builder(cfg.engine, cfg.spec.name).capabilities.resume:
            raise ConfigError(
                [
                    FieldError(
                        "--resume",
                        f"{cfg.spec.name} runs of engine {cfg.engine} cannot be "
                        "resumed (no checkpoint resume); start a new run",
                    )
                ]
            )
        differences = _resume_differences(run.read_config(), effective)
        if differences:
            raise ConfigError(differences)
        resume_from = run.latest_checkpoint()
        if resume_from is None:
            raise ConfigError([FieldError("--resume", f"no checkpoint in {run.checkpoints} to resume from")])
    else:
        run = RunDir(output if output is not None else runs_dir() / new_run_id(cfg.spec.name))
        if run.path.exists() and any(run.path.iterdir()):
            raise ConfigError(
                [
                    FieldError(
                        "--output",
                        f"{run.path} already exists and is not empty; use "
                        "--resume to continue it or choose another directory",
                    )
                ]
            )
    run.create()

    stopper = StopSignal(run.stop_file, stop_at_step=stop_at_step)
    dist = DistContext()
    writer = RunWriter(run, rank=dist.rank, keep_last=cfg.training.keep_last_checkpoints)
    if run.stop_file.exists():
        run.stop_file.unlink()  # a STOP left from the previous attempt must not stop the resumed one
    with _log_to(run):
        step: int | None = None
        try:
            if resume_from is None:
                run.record("config", run.write_config(effective))
                (run.path / "env.json").write_text(json.dumps(environment_info(), indent=2) + "\n")
                run.update_run_info(
                    run_id=run.path.name,
                    algorithm=cfg.spec.name,
                    engine=cfg.engine,
                    status="running",
                    created_at=now_iso(),
                    overrides=overrides,
                    attempts=1,
                )
            else:
                step = int(resume_from.name.rsplit("_", 1)[-1])
                dropped = run.truncate_metrics_after(step)
                dropped_rollouts = run.truncate_rollouts_after(step)
                if effective != run.read_config():
                    run.record("config", run.write_config(effective))
                info = run.read_run_info()
                run.update_run_info(
                    status="running",
                    resumed_from=resume_from.name,
                    attempts=info.get("attempts", 1) + 1,
                    resume_overrides=overrides,
                )
                log.info(
                    "resuming from %s (dropped %d metric lines and %d rollout rows logged after it)",
                    resume_from,
                    dropped,
                    dropped_rollouts,
                )
            for field in ("data.train_file", "data.eval_file"):
                if field in loaded:
                    run.record("dataset", loaded[field][2], field=field, format=loaded[field][1])
            gate_check.keep(run, gate_files)
            if loaded.get("judge_probe"):  # preflight's real call to each llm_judge endpoint (latency, score)
                (run.path / "judge_probe.json").write_text(json.dumps(loaded["judge_probe"], indent=2) + "\n")
            run.update_run_info(
                started_at=now_iso(),
                pid=os.getpid(),
                launcher=launcher,
                world_size=cfg.resources.processes,
                num_nodes=cfg.resources.num_nodes,
                processes_per_node=cfg.resources.num_devices,
            )
            log.info("run dir: %s (launcher %s, world size %d)", run.path, launcher, cfg.resources.processes)

            with _stop_on_signals(stopper):
                if launcher == "local" or require_builder(cfg.engine, cfg.spec.name).capabilities.own_workers:
                    try:
                        result = get_engine(cfg.engine).train(
                            cfg, run, loaded=loaded, resume_from=resume_from, stop=stopper, writer=writer, dist=dist
                        )
                        step, stopped, summary = result.step, result.stopped, result.summary
                    except TrainingStopped as stop:
                        step, stopped, summary = run.read_run_info().get("step"), str(stop), {}
                else:
                    step, stopped, summary = _train_ranks(
                        cfg, submitted, run, launcher, resume_from, stopper, stop_at_step
                    )
            writer.flush()  # every checkpoint and final file hashed before the run is recorded as ended

            status = "stopped" if stopped else "succeeded"
            run.update_run_info(status=status, step=step, stop_reason=stopped, finished_at=now_iso(), summary=summary)
            log.info("run %s at step %s%s", status, step, f" ({stopped})" if stopped else "")
            return RunResult(run_dir=run.path, status=status, step=step or 0, stop_reason=stopped)
        except BaseException as exc:  # noqa: BLE001 - every failure is recorded, then re-raised
            tb = traceback.format_exc()
            log.error("run failed: %s\n%s", exc, tb)
            with suppress(Exception):  # what was queued is recorded (the failure bundle lists it); its error is logged
                writer.flush()
            step = run.read_run_info().get("step", step)
            run.update_run_info(status="failed", finished_at=now_iso(), error=redact(f"{type(exc).__name__}: {exc}"))
            run.write_failure(exc, tb, step)
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise TrainingFailed(redact(f"{type(exc).__name__}: {exc}"), run.path) from exc
        finally:
            with suppress(Exception):
                writer.close()
            sys.stdout.flush()

"""One rank of a multi-process run: `python -m training_platform.training.rank_main RUN_DIR`, started by a launcher
(torchrun's process group, or a Ray Train worker) after the `tp train` driver prepared the run directory.

The driver writes `ranks/launch.json` (the config, the checkpoint to resume from, --stop-at-step) and owns
run.json's status; each rank validates the config again (datasets read on every rank), joins the process group,
sets its torch threads to cores / local ranks (the default oversubscribes the cores: 8x slower under contention
here), and runs the engine with a RunWriter for its rank (only rank 0 writes) and a StopSignal agreed through the
group. Rank 0 reports the result in `ranks/result.json`; a rank that fails writes `ranks/rank_K.error.json` (its
redacted traceback) and exits 1, so the driver can name it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import traceback
from contextlib import suppress
from pathlib import Path

from training_platform.core.files import atomic_write_text
from training_platform.core.timeutil import now_iso
from training_platform.training.distributed import DistContext
from training_platform.training.rundir import (
    LAUNCH_FILE,
    RESULT_FILE,
    RunDir,
    error_file,
    ranks_dir,
    redact,
    redact_record,
)


def _die_with_launcher() -> None:
    """A rank must not outlive the launcher that started it (SIGTERM when it dies, even by SIGKILL)."""
    from training_platform.core.procutil import PR_SET_PDEATHSIG, load_libc

    libc = load_libc()
    if libc is not None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _log_setup(run: RunDir, dist: DistContext) -> None:
    """Rank 0 appends to train.log (the run's log); the others to ranks/rank_K.log."""
    path = run.log_file if dist.is_main else ranks_dir(run) / f"rank_{dist.rank}.log"
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter(f"%(asctime)s %(levelname)s rank{dist.rank} %(name)s: %(message)s"))
    handler.addFilter(redact_record)
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    for noisy in ("httpx", "urllib3", "filelock", "fsspec"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    logging.captureWarnings(True)


def run_rank(run_dir: Path, launcher: str) -> int:
    from training_platform.training.engines import get_engine
    from training_platform.training.preflight import validate_config
    from training_platform.training.run_writer import RunWriter
    from training_platform.training.stop_signal import StopSignal, TrainingStopped

    run = RunDir(run_dir)
    dist = DistContext.from_env(launcher)
    launch = json.loads((ranks_dir(run) / LAUNCH_FILE).read_text())
    _log_setup(run, dist)
    log = logging.getLogger("training_platform.train")
    writer = None
    try:
        import torch

        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        threads = max(1, cores // max(1, dist.local_world_size))
        if launcher == "ray" and os.environ.get("OMP_NUM_THREADS", "").isdigit():
            threads = max(1, int(os.environ["OMP_NUM_THREADS"]))  # Ray's share: the worker's CPUs
        torch.set_num_threads(threads)
        loaded: dict = {}
        cfg = validate_config(launch["config"], loaded=loaded)
        device = "cuda" if cfg.resources.device in ("auto", "cuda") and torch.cuda.is_available() else "cpu"
        dist.init(device)
        log.info(
            "rank %d/%d (local %d/%d, node %d, pid %d) on %s, backend %s, %d torch threads",
            dist.rank,
            dist.world_size,
            dist.local_rank,
            dist.local_world_size,
            dist.node_rank,
            os.getpid(),
            device,
            dist.backend,
            torch.get_num_threads(),
        )
        stop = StopSignal(run.stop_file, stop_at_step=launch.get("stop_at_step"), agree=dist.any)
        # SIGTERM (the launcher shutting down, or a Ray stop): ask for the agreed stop; the STOP file is the
        # driver's way and reaches every node through the shared run directory.
        with suppress(ValueError):  # Ray Train runs this off the main thread: the STOP file is its way
            signal.signal(signal.SIGTERM, lambda signum, frame: stop.request_stop("SIGTERM"))
        writer = RunWriter(run, rank=dist.rank, keep_last=cfg.training.keep_last_checkpoints)
        resume_from = Path(launch["resume_from"]) if launch.get("resume_from") else None
        try:
            result = get_engine(cfg.engine).train(
                cfg, run, loaded=loaded, resume_from=resume_from, stop=stop, writer=writer, dist=dist
            )
            outcome = {"step": result.step, "stopped": result.stopped, "summary": result.summary}
        except TrainingStopped as stopped:
            outcome = {"step": run.read_run_info().get("step"), "stopped": str(stopped), "summary": {}}
        writer.flush()
        if dist.is_main:
            atomic_write_text(ranks_dir(run) / RESULT_FILE, json.dumps({**outcome, "ts": now_iso()}) + "\n")
        return 0
    except BaseException as exc:  # noqa: BLE001 - recorded for the driver, which names the rank
        tb = traceback.format_exc()
        log.error("rank %d failed: %s\n%s", dist.rank, exc, tb)
        with suppress(Exception):
            atomic_write_text(
                error_file(run, dist.rank),
                json.dumps(
                    {
                        "rank": dist.rank,
                        "node": dist.node_rank,
                        "type": type(exc).__name__,
                        "message": redact(str(exc)),
                        "traceback": redact(tb),
                        "ts": now_iso(),
                    },
                    indent=2,
                )
                + "\n",
            )
        return 1
    finally:
        if writer is not None:
            with suppress(Exception):
                writer.close()
        with suppress(Exception):
            dist.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="One rank of a tp training run (started by a launcher).")
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--launcher", default="torchrun")
    args = parser.parse_args(argv)
    _die_with_launcher()
    return run_rank(args.run_dir, args.launcher)


if __name__ == "__main__":
    sys.exit(main())

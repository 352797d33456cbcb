"""The torchrun launcher: the ranks of one node as a process group under `torch.distributed.run --standalone`.

The driver (`tp train`) starts torchrun in a session of its own that dies with the driver (PDEATHSIG), relays its
output to the driver's stderr (the job's console log), and while it runs turns a stop request into the STOP file
that every rank polls and agrees on. torchrun is told not to restart anything (`--max-restarts 0`): restarts are
the runner's, from the last checkpoint, so metric rows are never duplicated. When a rank fails, the outcome names
it: its own error file (rank_main) when it raised, otherwise torchrun's root-cause report (a rank killed by a
signal writes nothing).
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time

from training_platform.training.launchers import LaunchOutcome
from training_platform.training.rundir import RunDir, error_file, ranks_dir
from training_platform.training.stop_signal import StopSignal

log = logging.getLogger("training_platform.train")

KILL_AFTER_S = 60.0  # after a stop is agreed the ranks checkpoint and exit; torchrun is killed only if they hang

_ROOT_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
_ROOT_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def command(run: RunDir, nproc: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes",
        "1",
        "--nproc-per-node",
        str(nproc),
        "--max-restarts",
        "0",
        "-m",
        "training_platform.training.rank_main",
        str(run.path),
        "--launcher",
        "torchrun",
    ]


def _relay(stream, tail: collections.deque) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", errors="replace")
        tail.append(line.rstrip("\n"))
        sys.stderr.write(line)
        sys.stderr.flush()


def _failed_rank(run: RunDir, nproc: int, tail: list[str]) -> tuple[int | None, str]:
    """torchrun's root cause (the first rank that failed) with that rank's own error when it wrote one."""
    root_rank = root_exit = None
    # torchrun's report lists the other failures first, then "Root Cause (first observed failure)".
    starts = [i for i, line in enumerate(tail) if "Root Cause" in line]
    if starts:
        tail = tail[starts[-1] :]
    for line in tail:
        if root_rank is None and (m := _ROOT_RANK.match(line)):
            root_rank = int(m.group(1))
        elif root_rank is not None and root_exit is None and (m := _ROOT_EXIT.match(line)):
            root_exit = int(m.group(1))
    errors = {}
    for r in range(nproc):
        with contextlib.suppress(OSError, ValueError):
            errors[r] = json.loads(error_file(run, r).read_text())
    rank = root_rank if root_rank is not None else (min(errors, key=lambda r: errors[r]["ts"]) if errors else None)
    if rank is not None and rank in errors:
        e = errors[rank]
        return rank, f"rank {rank} failed: {e['type']}: {e['message']}"
    if rank is not None and root_exit is not None and root_exit < 0:
        name = signal.Signals(-root_exit).name if -root_exit in signal.valid_signals() else str(-root_exit)
        return rank, f"rank {rank} was killed by {name} (exit code {root_exit})"
    if rank is not None:
        return rank, f"rank {rank} exited with code {root_exit}"
    return None, "torchrun failed before any rank reported: " + " | ".join(tail[-5:])


def launch(run: RunDir, *, nproc: int, stop: StopSignal) -> LaunchOutcome:
    from training_platform.core.procutil import die_with_parent

    ranks_dir(run).mkdir(exist_ok=True)
    threads = max(1, _cores() // nproc)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = command(run, nproc)
    log.info("launching %d ranks: %s", nproc, " ".join(cmd))
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
        preexec_fn=die_with_parent(signal.SIGTERM),
    )
    tail: collections.deque[str] = collections.deque(maxlen=400)
    relay = threading.Thread(target=_relay, args=(proc.stdout, tail), daemon=True)
    relay.start()
    stop_since: float | None = None
    try:
        while proc.poll() is None:
            if stop.reason is not None:
                if stop_since is None:
                    log.info("stop requested (%s): asking every rank through the STOP file", stop.reason)
                    stop_since = time.monotonic()
                run.stop_file.touch()  # every tick, like the platform's worker: cheap, and never missed
                if time.monotonic() - stop_since > KILL_AFTER_S:
                    log.error("the ranks did not stop within %.0f s: killing them", KILL_AFTER_S)
                    os.killpg(proc.pid, signal.SIGKILL)
            time.sleep(0.2)
    finally:
        if proc.poll() is None:  # the driver is being interrupted itself: take the ranks down with it
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        relay.join(timeout=10)
        # Nothing of the group may outlive the launch (a rank stuck in a collective after its peer died).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    if proc.returncode == 0:
        return LaunchOutcome(0)
    rank, message = _failed_rank(run, nproc, list(tail))
    return LaunchOutcome(proc.returncode, rank, message)

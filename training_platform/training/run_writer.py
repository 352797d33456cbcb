"""RunWriter: how an engine writes into the run directory, whatever runs it (one process, torchrun, Ray).

Engine-neutral (no torch, no transformers): an engine reports metric rows and saved checkpoints here and the
writer keeps the run layout (`training/rundir.py`) true:
- only the main process (global rank 0) writes: every rank may call every method, the others return at once, so
  a metric row or a checkpoint is never recorded twice;
- a saved checkpoint is moved into `checkpoints/step_NNNNNN` and `latest` points at it at once (a resume right
  after sees it); hashing its files into the manifest and rotating old checkpoints run on a background thread, so
  the training loop does not wait for sha256 over gigabytes. `flush()` waits for that work and re-raises the first
  error it met (a failed hash is never silent); the runner flushes before it records the run's end.
The platform's ingest reads the manifest and registers a checkpoint only once all of its files are recorded.
"""

from __future__ import annotations

import json
import logging
import queue
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from training_platform.training.rundir import RunDir, checkpoint_name

log = logging.getLogger("training_platform.train")


class RunWriter:
    def __init__(self, run: RunDir, *, rank: int = 0, keep_last: int = 3, background: bool = True):
        self.run = run
        self.rank = rank
        self.keep_last = keep_last
        self._background = background
        self._tasks: queue.Queue[Callable[[], object] | None] = queue.Queue()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    # -- metrics
    def log_metrics(self, record: dict[str, Any]) -> None:
        """Append one metric row (`step` first) to metrics.jsonl."""
        if not self.is_main:
            return
        line = json.dumps(record)
        with self.run.metrics_file.open("a", encoding="utf-8") as f:
            f.write(line + "\n")
        log.info("metrics %s", line)

    # -- checkpoints
    def checkpoint_saved(self, step: int, saved: Path) -> Path | None:
        """`saved` (the engine's own checkpoint directory) becomes `checkpoints/step_NNNNNN`; its files are hashed
        and older checkpoints rotated in the background. Call on every rank after all ranks finished saving."""
        if not self.is_main:
            return None
        saved = Path(saved)
        if not saved.is_dir():
            return None
        target = self.run.checkpoints / checkpoint_name(step)
        if target.resolve() != saved.resolve():
            if target.exists():
                shutil.rmtree(target)
            saved.rename(target)
        self.run.set_latest(target)
        self.run.update_run_info(last_checkpoint=target.name, step=step)
        self._submit(lambda: self._register(target, step))
        log.info("checkpoint saved: %s", target)
        return target

    def _register(self, target: Path, step: int) -> None:
        self.run.record_tree("checkpoint", target, step=step)
        for old in self.run.checkpoint_dirs()[: -self.keep_last]:
            if self.run.is_pinned(old):  # being evaluated, or the best so far: kept beyond keep_last
                continue
            shutil.rmtree(old)
            self.run.record_removed(old)

    def record_tree(self, kind: str, directory: Path) -> None:
        """Hash a finished tree (final/, final_adapter/) into the manifest, after the checkpoints queued before."""
        if self.is_main:
            self._submit(lambda: self.run.record_tree(kind, directory))

    def update_run_info(self, **fields: Any) -> None:
        if self.is_main:
            self.run.update_run_info(**fields)

    # -- the background queue
    def _submit(self, task: Callable[[], object]) -> None:
        if not self._background:
            task()
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="tp-run-writer", daemon=True)
            self._thread.start()
        self._tasks.put(task)

    def _work(self) -> None:
        while True:
            task = self._tasks.get()
            try:
                if task is None:
                    return
                if self._error is None:  # after a failure nothing more is recorded: the run is failing
                    task()
            except BaseException as exc:  # noqa: BLE001 - kept and re-raised by flush() in the training thread
                log.exception("recording into the run directory failed")
                self._error = exc
            finally:
                self._tasks.task_done()

    def flush(self) -> None:
        """Wait until every queued hash and rotation is done; raise the first error met."""
        if self._thread is not None:
            self._tasks.join()
        if self._error is not None:
            error, self._error = self._error, None
            raise RuntimeError(f"recording into the run directory failed: {error}") from error

    def close(self) -> None:
        try:
            self.flush()
        finally:
            if self._thread is not None:
                self._tasks.put(None)
                self._thread.join(timeout=60)
                self._thread = None

"""The run directory: everything a run produced, hashed so it can be audited later.

runs/<run-id>/
  config_effective.yaml   every default filled in (overrides applied)
  run.json                id, status, overrides, timestamps, final step
  env.json                package versions, git commit, python, hardware
  metrics.jsonl           one object per logging step
  rollouts.jsonl          RL: a sample of each logging step's rollouts (training/rollouts.py), size-capped
  train.log               the log
  manifest.jsonl          sha256 + bytes of every dataset file read, the config and every checkpoint/final file
  checkpoints/step_NNNNNN/, checkpoints/latest -> step_NNNNNN
  pins/step_NNNNNN.<holder>  a checkpoint that must survive rotation (being evaluated, the best one)
  final/                  HF model (LoRA runs: merged model; adapter in final_adapter/)
  error.json, failpack.tgz  only when the run failed
"""

from __future__ import annotations

import json
import logging
import os
import platform
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import yaml

from training_platform.core.files import atomic_write_text, sha256_file
from training_platform.core.timeutil import now_iso

CHECKPOINT_PREFIX = "step_"
SECRET_ENV_PATTERN = re.compile(r"(TOKEN|SECRET|PASSWORD|API_KEY|APIKEY|ACCESS_KEY|PRIVATE_KEY)", re.I)
SECRET_VALUE_PATTERN = re.compile(r"(hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}|AKIA[0-9A-Z]{16})")


def redact(text: str) -> str:
    """Remove secret values (from the environment and token-shaped strings) from text bound for logs/bundles."""
    for name, value in os.environ.items():
        if SECRET_ENV_PATTERN.search(name) and value and len(value) >= 6:
            text = text.replace(value, f"<redacted:{name}>")
    return SECRET_VALUE_PATTERN.sub("<redacted>", text)


def redact_record(record: logging.LogRecord) -> bool:
    """Log filter of the run's log files: the message redacted in place; every record passes."""
    record.msg = redact(str(record.msg))
    return True


def checkpoint_name(step: int) -> str:
    return f"{CHECKPOINT_PREFIX}{step:06d}"


class RunDir:
    def __init__(self, path: str | Path):
        self.path = Path(path).resolve()

    # -- layout
    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def final(self) -> Path:
        return self.path / "final"

    @property
    def metrics_file(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def rollouts_file(self) -> Path:
        return self.path / "rollouts.jsonl"

    @property
    def log_file(self) -> Path:
        return self.path / "train.log"

    @property
    def manifest_file(self) -> Path:
        return self.path / "manifest.jsonl"

    @property
    def stop_file(self) -> Path:
        return self.path / "STOP"

    def create(self) -> None:
        self.checkpoints.mkdir(parents=True, exist_ok=True)

    # -- run.json
    def read_run_info(self) -> dict[str, Any]:
        try:
            return json.loads((self.path / "run.json").read_text())
        except FileNotFoundError:
            return {}

    def update_run_info(self, **fields: Any) -> dict[str, Any]:
        info = self.read_run_info()
        info.update(fields)
        atomic_write_text(self.path / "run.json", json.dumps(info, indent=2) + "\n")
        return info

    # -- config
    def write_config(self, effective: dict) -> Path:
        path = self.path / "config_effective.yaml"
        atomic_write_text(path, yaml.safe_dump(effective, sort_keys=False))
        return path

    def read_config(self) -> dict:
        return yaml.safe_load((self.path / "config_effective.yaml").read_text())

    # -- manifest
    def record(self, kind: str, file: Path, **extra: Any) -> dict:
        """Hash one file into the manifest. Paths inside the run dir are stored relative to it."""
        file = Path(file).resolve()
        try:
            shown = str(file.relative_to(self.path))
        except ValueError:
            shown = str(file)
        entry = {
            "kind": kind,
            "path": shown,
            "sha256": sha256_file(file),
            "bytes": file.stat().st_size,
            "ts": now_iso(),
            **extra,
        }
        with self.manifest_file.open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")
        return entry

    def record_tree(self, kind: str, directory: Path, **extra: Any) -> int:
        count = 0
        for file in sorted(p for p in Path(directory).rglob("*") if p.is_file()):
            self.record(kind, file, **extra)
            count += 1
        return count

    def record_removed(self, directory: Path) -> None:
        entry = {"kind": "removed", "path": str(Path(directory).resolve().relative_to(self.path)), "ts": now_iso()}
        with self.manifest_file.open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")

    def manifest(self) -> list[dict]:
        if not self.manifest_file.exists():
            return []
        return [json.loads(line) for line in self.manifest_file.read_text().splitlines() if line.strip()]

    # -- checkpoints
    def checkpoint_dirs(self) -> list[Path]:
        if not self.checkpoints.exists():
            return []
        dirs = [
            p
            for p in self.checkpoints.iterdir()
            if p.is_dir() and not p.is_symlink() and p.name.startswith(CHECKPOINT_PREFIX)
        ]
        return sorted(dirs, key=lambda p: int(p.name[len(CHECKPOINT_PREFIX) :]))

    def latest_checkpoint(self) -> Path | None:
        link = self.checkpoints / "latest"
        if link.is_symlink() and link.resolve().is_dir():
            return link.resolve()
        dirs = self.checkpoint_dirs()
        return dirs[-1] if dirs else None

    # -- pins: checkpoints kept by others (the platform pins one while it is evaluated, and the best one)
    @property
    def pins(self) -> Path:
        return self.path / "pins"

    def pin(self, checkpoint: str | Path, holder: str) -> None:
        self.pins.mkdir(exist_ok=True)
        (self.pins / f"{Path(checkpoint).name}.{holder}").touch()

    def unpin(self, checkpoint: str | Path, holder: str) -> None:
        (self.pins / f"{Path(checkpoint).name}.{holder}").unlink(missing_ok=True)

    def unpin_holder(self, holder: str) -> None:
        if self.pins.is_dir():
            for pin in self.pins.glob(f"*.{holder}"):
                pin.unlink(missing_ok=True)

    def is_pinned(self, checkpoint: str | Path) -> bool:
        return self.pins.is_dir() and any(self.pins.glob(f"{Path(checkpoint).name}.*"))

    def set_latest(self, checkpoint: Path) -> None:
        link = self.checkpoints / "latest"
        tmp = self.checkpoints / ".latest.tmp"
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        tmp.symlink_to(checkpoint.name)
        os.replace(tmp, link)

    # -- metrics
    def truncate_metrics_after(self, step: int) -> int:
        """On resume: drop metric lines logged after the checkpoint we resume from (they will be logged again)."""
        if not self.metrics_file.exists():
            return 0
        kept, dropped = [], 0
        for line in self.metrics_file.read_text().splitlines():
            if line.strip() and json.loads(line).get("step", 0) <= step:
                kept.append(line)
            elif line.strip():
                dropped += 1
        atomic_write_text(self.metrics_file, "".join(f"{line}\n" for line in kept))
        return dropped

    def truncate_rollouts_after(self, step: int) -> int:
        """On resume: drop rollout rows of steps after the checkpoint we resume from (streamed: the file may be
        large). Returns how many were dropped."""
        if not self.rollouts_file.exists():
            return 0
        tmp = self.rollouts_file.with_name(f".{self.rollouts_file.name}.tmp")
        dropped = 0
        with self.rollouts_file.open("rb") as src, tmp.open("wb") as dst:
            for line in src:
                if not line.strip():
                    continue
                if not line.endswith(b"\n"):  # a row cut short by a crash
                    dropped += 1
                    continue
                try:
                    keep = json.loads(line).get("step", 0) <= step
                except ValueError:
                    keep = False
                if keep:
                    dst.write(line)
                else:
                    dropped += 1
        os.replace(tmp, self.rollouts_file)
        return dropped

    def read_metrics(self) -> list[dict]:
        if not self.metrics_file.exists():
            return []
        return [json.loads(line) for line in self.metrics_file.read_text().splitlines() if line.strip()]

    # -- failure
    def tail_log(self, lines: int = 200) -> list[str]:
        if not self.log_file.exists():
            return []
        return self.log_file.read_text(errors="replace").splitlines()[-lines:]

    def write_failure(self, exc: BaseException, tb: str, step: int | None) -> Path:
        error = {
            "type": type(exc).__name__,
            "message": redact(str(exc)),
            "traceback": redact(tb),
            "step": step,
            "ts": now_iso(),
            "log_tail": [redact(line) for line in self.tail_log(200)],
        }
        atomic_write_text(self.path / "error.json", json.dumps(error, indent=2) + "\n")
        return self.write_failpack()

    def write_failpack(self) -> Path:
        """Logs, reports and the effective config; text files are redacted; never weights or secrets."""
        target = self.path / "failpack.tgz"
        tmp = self.path / ".failpack.tgz.tmp"
        names = [
            "error.json",
            "train.log",
            "metrics.jsonl",
            "config_effective.yaml",
            "run.json",
            "env.json",
            "manifest.jsonl",
        ]
        with tarfile.open(tmp, "w:gz") as tar:
            for name in names:
                file = self.path / name
                if not file.is_file():
                    continue
                data = redact(file.read_text(errors="replace")).encode()
                info = tarfile.TarInfo(name=f"{self.path.name}/{name}")
                info.size = len(data)
                info.mtime = int(time.time())
                import io

                tar.addfile(info, io.BytesIO(data))
        os.replace(tmp, target)
        return target


def verify(run_path: str | Path) -> tuple[int, list[str]]:
    """Re-hash every file the manifest recorded. Returns (files checked, problems)."""
    run = RunDir(run_path)
    entries = run.manifest()
    if not entries:
        return 0, [f"{run.manifest_file}: missing or empty"]
    removed = [e["path"] for e in entries if e["kind"] == "removed"]
    latest: dict[str, dict] = {}
    for e in entries:
        if e["kind"] != "removed":
            latest[e["path"]] = e  # a file re-recorded later (e.g. a re-saved checkpoint) counts as its last hash
    problems: list[str] = []
    checked = 0
    for path, e in latest.items():
        if any(path == r or path.startswith(r.rstrip("/") + "/") for r in removed):
            continue
        file = Path(path) if Path(path).is_absolute() else run.path / path
        if not file.is_file():
            problems.append(f"{path}: missing")
            continue
        checked += 1
        size = file.stat().st_size
        if size != e["bytes"]:
            problems.append(f"{path}: size {size} != recorded {e['bytes']}")
        elif sha256_file(file) != e["sha256"]:
            problems.append(f"{path}: sha256 mismatch")
    return checked, problems


def environment_info() -> dict[str, Any]:
    from importlib import metadata

    packages: dict[str, str | None] = {}
    for name in (
        "training_platform",
        "torch",
        "transformers",
        "trl",
        "peft",
        "datasets",
        "accelerate",
        "tokenizers",
        "math-verify",
        "pydantic",
    ):
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            packages[name] = None
    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": packages,
        "cpu_count": os.cpu_count(),
        "git_commit": _git_commit(),
        "argv": [redact(a) for a in sys.argv],
    }
    try:
        import psutil

        info["memory_total_mb"] = round(psutil.virtual_memory().total / 2**20)
    except Exception:  # noqa: BLE001
        pass
    try:
        import torch

        info["cuda_available"] = torch.cuda.is_available()
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        info["torch_threads"] = torch.get_num_threads()
    except Exception:  # noqa: BLE001
        pass
    return info


def _git_commit() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


# The launcher's record of a multi-process run (rank_main.py writes it; launchers and the runner read it).
LAUNCH_FILE = "launch.json"
RESULT_FILE = "result.json"


def ranks_dir(run: RunDir) -> Path:
    return run.path / "ranks"


def error_file(run: RunDir, rank: int) -> Path:
    return ranks_dir(run) / f"rank_{rank}.error.json"

"""Shared helpers for the tests that run real `tp` processes (training runs, launchers)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "configs" / "examples"
TP = [sys.executable, "-m", "training_platform.cli"]


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def train_records(run_dir: Path) -> list[dict]:
    return [m for m in read_metrics(run_dir) if "loss" in m and not any(k.startswith("eval_") for k in m)]

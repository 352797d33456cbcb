"""Helpers shared by the evaluation tests (imported as a module, not a conftest)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def read_jsonl(path: Path) -> list[Any]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def humaneval_problems() -> list[dict[str, Any]]:
    from training_platform.evaluation.benchmarks.humaneval import humaneval_path

    with gzip.open(humaneval_path(), "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def run_eval_cli(*args: str):
    """`tp eval ARGS...` in-process; returns the click Result (stdout / stderr separate)."""
    from training_platform.cli import app

    return CliRunner().invoke(app, ["eval", *map(str, args)], catch_exceptions=False)


def last_json_line(text: str) -> dict[str, Any]:
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines, "no output"
    return json.loads(lines[-1])

"""Helpers shared by the data factory tests (imported as a module, not a conftest)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

USER = {"role": "user", "content": "What is 2+2?"}
ASSISTANT = {"role": "assistant", "content": "2+2=4. The answer is 4."}
CONV = [USER, ASSISTANT]


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def read_jsonl(path: Path) -> list[Any]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def write_csv(path: Path, rows: list[dict]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_parquet(path: Path, rows: list[dict]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def read_parquet(path: Path) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def leftovers(directory: Path) -> list[str]:
    """Temp files a failed atomic write might have left behind."""
    return sorted(p.name for p in Path(directory).iterdir() if ".tmp" in p.name)


class Result:
    def __init__(self, exit_code: int, stdout: str, stderr: str):
        self.exit_code, self.stdout, self.stderr = exit_code, stdout, stderr

    def __repr__(self) -> str:
        return f"exit {self.exit_code}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}"


def run_data_cli(*args: Any) -> Result:
    from training_platform.cli import app

    result = CliRunner().invoke(app, ["data", *map(str, args)], catch_exceptions=False)
    return Result(result.exit_code, result.stdout, result.stderr)

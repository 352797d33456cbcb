"""`data.gate` in the training core: the train file must pass its quality-gate profile before a run starts.

Offline (`tp train`): the gate runs here on the train file (built-in profiles and $TP_GATE_PROFILES_FILE); a failing
check is a config error at `data.gate` naming the failing checks (exit 2, nothing written). Under the platform the
worker's preflight has already decided (a stored passing report, the gate run there, or an admin override) and hands
its report over in $TP_GATE_REPORTS_DIR (`<profile>.json`, and `gate_override.json` when overridden); the run only
checks that the report is about this very file. Either way the run dir keeps `gates/<profile>.json` (and
`gate_override.json`), both recorded in the manifest.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from training_platform.training.config import ConfigError, FieldError

GATE_REPORTS_ENV = "TP_GATE_REPORTS_DIR"
OVERRIDE_FILE = "gate_override.json"


def failing_summary(report: dict[str, Any], limit: int = 8) -> str:
    parts = []
    for check in report.get("checks", []):
        if check.get("verdict") == "fail":
            value = json.dumps(check.get("value")) if check.get("value") is not None else "-"
            parts.append(f"{check['name']} ({value}, needs {check.get('threshold') or '-'})")
    more = f" (+{len(parts) - limit} more)" if len(parts) > limit else ""
    return ", ".join(parts[:limit]) + more


def enforce(cfg, train_path: Path) -> list[tuple[str, dict[str, Any]]]:
    """The files (relative to the run dir) to keep: the gate report, and the override if any. Raises ConfigError
    at `data.gate` when the gate fails without an override."""
    gate = cfg.data.gate
    if gate is None:
        return []
    from training_platform.data.versions import file_sha256

    name = gate.profile
    handed = os.environ.get(GATE_REPORTS_ENV)
    if handed and (Path(handed) / f"{name}.json").is_file():
        report = json.loads((Path(handed) / f"{name}.json").read_text())
        override_file = Path(handed) / OVERRIDE_FILE
        override = json.loads(override_file.read_text()) if override_file.is_file() else None
        sha = file_sha256(train_path)
        if report.get("dataset", {}).get("sha256") != sha:
            raise ConfigError([FieldError("data.gate", f"the gate report handed over is for other content "
                                                       f"(sha256 {report.get('dataset', {}).get('sha256')}), not "
                                                       f"the train file (sha256 {sha})")])
        if not report.get("passed") and override is None:
            raise ConfigError([FieldError("data.gate", f"quality gate {name!r} failed: {failing_summary(report)}")])
        files = [(f"gates/{name}.json", report)]
        if override is not None:
            files.append((OVERRIDE_FILE, override))
        return files

    from training_platform.data.gate import GateError, resolve_local_profile, run_gate
    from training_platform.paths import resolve_data_path

    try:
        profile = resolve_local_profile(name)
    except GateError as exc:
        raise ConfigError([FieldError("data.gate.profile", msg) for _, msg in exc.errors]) from None
    try:
        report = run_gate(train_path, profile, eval_sets=[resolve_data_path(p) for p in gate.eval_sets],
                          reference=resolve_data_path(gate.reference) if gate.reference else None,
                          fmt=None if cfg.data.format == "auto" else cfg.data.format)
    except GateError as exc:
        raise ConfigError([FieldError(f"data.gate.{loc}", msg) for loc, msg in exc.errors]) from None
    if not report["passed"]:
        raise ConfigError([FieldError("data.gate", f"quality gate {name!r} failed: {failing_summary(report)}")])
    return [(f"gates/{name}.json", report)]


def keep(run, files: list[tuple[str, dict[str, Any]]]) -> None:
    """Write the gate files into the run dir and record them in its manifest."""
    from training_platform.data.io import write_json

    for relative, content in files:
        path = run.path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, content)
        run.record("gate_override" if relative == OVERRIDE_FILE else "gate_report", path)

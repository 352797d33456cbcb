"""`data.gate` in the training core: the train file must pass its quality-gate profile before a run starts.

Offline (`tp train`): the gate runs here on the train file (built-in profiles and $TP_GATE_PROFILES_FILE); a failing
check is a config error at `data.gate` naming the failing checks (exit 2, nothing written). Under the platform the
worker's preflight has already decided (a stored passing report, the gate run there, or an admin override) and hands
its report over in $TP_GATE_REPORTS_DIR (`<profile>.json`, and `gate_override.json` when overridden); the run only
checks that the report is about this very file. Either way the run dir keeps `gates/<profile>.json` (and
`gate_override.json`), both recorded in the manifest.

A profile with the `reward_shadow` check also requires a passing reward shadow report whose `new` scorer is this
job's reward set: offline the file `data.gate.reward_shadow_report`; under the platform the worker finds one among
the owner's succeeded `POST /rewards/shadow` jobs (or reads that file) and hands it over as `reward_shadow.json`.
The run dir keeps it as `gates/reward_shadow.json`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from training_platform.core.errors import FieldError
from training_platform.core.settings import current_settings
from training_platform.training.config import ConfigError

GATE_REPORTS_ENV = "TP_GATE_REPORTS_DIR"
OVERRIDE_FILE = "gate_override.json"
SHADOW_FILE = "reward_shadow.json"  # the shadow report that approved the job's reward set (kept in gates/)


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
    from training_platform.core.files import sha256_file

    name = gate.profile
    handed = current_settings().gate_reports_dir
    if handed and (Path(handed) / f"{name}.json").is_file():
        report = json.loads((Path(handed) / f"{name}.json").read_text())
        override_file = Path(handed) / OVERRIDE_FILE
        override = json.loads(override_file.read_text()) if override_file.is_file() else None
        sha = sha256_file(train_path)
        if report.get("dataset", {}).get("sha256") != sha:
            raise ConfigError(
                [
                    FieldError(
                        "data.gate",
                        f"the gate report handed over is for other content "
                        f"(sha256 {report.get('dataset', {}).get('sha256')}), not "
                        f"the train file (sha256 {sha})",
                    )
                ]
            )
        if not report.get("passed") and override is None:
            raise ConfigError([FieldError("data.gate", f"quality gate {name!r} failed: {failing_summary(report)}")])
        files = [(f"gates/{name}.json", report)]
        if (Path(handed) / SHADOW_FILE).is_file():
            files.append((f"gates/{SHADOW_FILE}", json.loads((Path(handed) / SHADOW_FILE).read_text())))
        if override is not None:
            files.append((OVERRIDE_FILE, override))
        return files

    from training_platform.core.paths import resolve_data_path
    from training_platform.data.gate import GateError, resolve_local_profile, run_gate

    try:
        profile = resolve_local_profile(name)
    except GateError as exc:
        raise ConfigError([FieldError("data.gate.profile", msg) for _, msg in exc.errors]) from None
    try:
        report = run_gate(
            train_path,
            profile,
            eval_sets=[resolve_data_path(p) for p in gate.eval_sets],
            reference=resolve_data_path(gate.reference) if gate.reference else None,
            fmt=None if cfg.data.format == "auto" else cfg.data.format,
        )
    except GateError as exc:
        raise ConfigError([FieldError(f"data.gate.{loc}", msg) for loc, msg in exc.errors]) from None
    if not report["passed"]:
        raise ConfigError([FieldError("data.gate", f"quality gate {name!r} failed: {failing_summary(report)}")])
    files = [(f"gates/{name}.json", report)]
    min_spearman = shadow_rule(profile, cfg)
    if min_spearman is not None:
        files.append((f"gates/{SHADOW_FILE}", offline_shadow_report(cfg, name, min_spearman)))
    return files


def shadow_rule(profile, cfg) -> float | None:
    """The profile's reward_shadow minimum Spearman when it applies to this job (it has reward functions)."""
    from training_platform.data.gate import REWARD_SHADOW_CHECK

    params = profile.checks.get(REWARD_SHADOW_CHECK)
    if params is None or not cfg.rewards:
        return None
    return float(params.get("min_spearman", 0.8))


def job_rewards(cfg) -> list[dict[str, Any]]:
    return [r.model_dump(mode="json") for r in cfg.rewards]


def offline_shadow_report(cfg, profile_name: str, min_spearman: float) -> dict[str, Any]:
    """Offline the approval is a `tp rewards shadow --report` file named by data.gate.reward_shadow_report."""
    from training_platform.core.paths import resolve_data_path
    from training_platform.training.rewards.shadow import approval_problem

    loc = "data.gate.reward_shadow_report"
    given = cfg.data.gate.reward_shadow_report
    if given is None:
        raise ConfigError(
            [
                FieldError(
                    loc,
                    f"gate profile {profile_name!r} requires a passing reward shadow report "
                    f"for this job's rewards: run `tp rewards shadow --old CURRENT --new "
                    f"THESE --data FILE --report FILE` and name the file here",
                )
            ]
        )
    path = resolve_data_path(given)
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError([FieldError(loc, f"cannot read the shadow report {given}: {exc}")]) from None
    problem = approval_problem(report, job_rewards(cfg), min_spearman=min_spearman)
    if problem is not None:
        raise ConfigError(
            [FieldError(loc, f"the shadow report {given} does not approve this job's rewards: {problem}")]
        )
    return report


def keep(run, files: list[tuple[str, dict[str, Any]]]) -> None:
    """Write the gate files into the run dir and record them in its manifest."""
    from training_platform.core.files import write_json

    for relative, content in files:
        path = run.path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, content)
        kind = {OVERRIDE_FILE: "gate_override", f"gates/{SHADOW_FILE}": "reward_shadow_report"}.get(
            relative, "gate_report"
        )
        run.record(kind, path)

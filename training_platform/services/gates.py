"""Quality gates over the platform: profiles (built-in, the operator's TP_GATE_PROFILES_FILE, admin rows), gate
runs on dataset versions (the `gate` data job and the training preflight) and their stored reports. The checks
themselves are the data factory's (`training_platform.data.gate`)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from sqlmodel import Session, col, select

from training_platform.core.path_policy import Reader, check_path, resolve_path, shown
from training_platform.core.settings import Settings
from training_platform.data.gate import MAX_EVAL_SETS, GateError, GateProfile, local_profiles, parse_profile
from training_platform.db.models import DatasetVersionRecord, GateProfileRecord, GateReportRecord, row_id
from training_platform.services.datasets import read_limits

log = logging.getLogger("training_platform.gates")

GATE = "gate"  # the data job's operation


def file_profiles(settings: Settings) -> dict[str, tuple[GateProfile, str]]:
    """Built-in + the operator's file profiles: name -> (profile, source)."""
    return local_profiles(settings.gate_profiles_file or "")


def row_profile(row: GateProfileRecord) -> GateProfile:
    return parse_profile(row.name, {"description": row.description, "checks": row.checks})


def all_profiles(session: Session, settings: Settings) -> dict[str, tuple[GateProfile, str]]:
    profiles = file_profiles(settings)
    for row in session.exec(select(GateProfileRecord).order_by(GateProfileRecord.name)).all():
        if row.name not in profiles:
            try:
                profiles[row.name] = (row_profile(row), "admin")
            except GateError as exc:  # a check removed since: the profile is unusable, say so when named
                log.warning("gate profile %r is invalid now: %s", row.name, exc)
    return profiles


def resolve_profile(session: Session, settings: Settings, name: str, loc: str = "profile") -> GateProfile:
    profiles = all_profiles(session, settings)
    if name not in profiles:
        raise GateError([(loc, f"unknown gate profile {name!r}; use one of {', '.join(sorted(profiles))}")])
    return profiles[name][0]


def check_inputs(
    eval_sets: list[str], reference: str | None, settings: Settings, reader: Reader, prefix: str = ""
) -> list[tuple[str, str]]:
    """Every eval set / reference path readable by `reader` and an existing file; bounded count."""
    errors: list[tuple[str, str]] = []
    if len(eval_sets) > MAX_EVAL_SETS:
        errors.append((f"{prefix}eval_sets", f"at most {MAX_EVAL_SETS} eval sets"))
        return errors
    items = [(f"{prefix}eval_sets[{i}]", p) for i, p in enumerate(eval_sets)]
    if reference is not None:
        items.append((f"{prefix}reference", reference))
    for loc, value in items:
        problem = check_path(loc, value, settings, reader)
        if problem is not None:
            errors.append((loc, problem.reason))
        elif not resolve_path(value, settings).is_file():
            errors.append((loc, f"no such file: {shown(value, settings)}"))
    return errors


def run_on_file(
    path: Path,
    profile: GateProfile,
    settings: Settings,
    *,
    eval_sets: list[str] | None = None,
    reference: str | None = None,
    fmt: str | None = None,
) -> dict[str, Any]:
    from training_platform.data.gate import run_gate

    return run_gate(
        path,
        profile,
        eval_sets=[resolve_path(p, settings) for p in eval_sets or []],
        reference=resolve_path(reference, settings) if reference else None,
        fmt=fmt,
        limits=read_limits(settings),
        shown=lambda p: shown(p, settings),
    )


def store_report(
    session: Session, version: DatasetVersionRecord, report: dict[str, Any], job_id: int | None
) -> GateReportRecord:
    record = GateReportRecord(
        dataset_version_id=row_id(version),
        sha256=version.sha256,
        profile_name=report["profile"]["name"],
        profile_hash=report["profile"]["hash"],
        passed=bool(report["passed"]),
        report=report,
        job_id=job_id,
    )
    session.add(record)
    session.flush()
    return record


def passing_report(
    session: Session, sha256: str, profile: GateProfile, eval_shas: list[str], reference_sha: str | None
) -> GateReportRecord | None:
    """The newest passing report for exactly this content, profile (name + hash) and inputs."""
    from training_platform.data.gate import inputs_match

    rows = session.exec(
        select(GateReportRecord)
        .where(
            GateReportRecord.sha256 == sha256,
            GateReportRecord.profile_name == profile.name,
            GateReportRecord.profile_hash == profile.hash,
            GateReportRecord.passed == True,  # noqa: E712 - SQL
        )
        .order_by(col(GateReportRecord.id).desc())
        .limit(50)
    ).all()
    return next((r for r in rows if inputs_match(r.report, eval_shas, reference_sha)), None)


def version_for_file(session: Session, path: Path, settings: Settings) -> DatasetVersionRecord | None:
    """The dataset version whose content file this is (by its content-store path, else by sha256)."""
    from training_platform.core.files import sha256_file

    try:
        relative = str(path.resolve().relative_to(settings.data_path))
    except ValueError:
        relative = None
    if relative is not None:
        found = session.exec(
            select(DatasetVersionRecord)
            .where(DatasetVersionRecord.path == relative)
            .order_by(col(DatasetVersionRecord.id))
            .limit(1)
        ).first()
        if found is not None:
            return found
    sha = sha256_file(path)
    return session.exec(
        select(DatasetVersionRecord)
        .where(DatasetVersionRecord.sha256 == sha)
        .order_by(col(DatasetVersionRecord.id))
        .limit(1)
    ).first()


def stored_verdict(session: Session, settings: Settings, gate: Any, train: Path) -> tuple[str, str]:
    """What the stored reports say of `data.gate` for this train file, without running the gate (the API's
    /jobs/validate; the worker's preflight runs it when no report matches): ("pass" | "fail" | "unknown", why).
    The newest report for exactly this content, profile (name + hash) and inputs decides. Raises GateError for a
    profile that does not exist."""
    from training_platform.core.files import sha256_file
    from training_platform.core.paths import resolve_data_path
    from training_platform.data.gate import inputs_match
    from training_platform.training.gate_check import failing_summary

    profile = resolve_profile(session, settings, gate.profile, loc="data.gate.profile")
    eval_shas = [sha256_file(resolve_data_path(p)) for p in gate.eval_sets]
    reference_sha = sha256_file(resolve_data_path(gate.reference)) if gate.reference else None
    rows = session.exec(
        select(GateReportRecord)
        .where(
            GateReportRecord.sha256 == sha256_file(train),
            GateReportRecord.profile_name == profile.name,
            GateReportRecord.profile_hash == profile.hash,
        )
        .order_by(col(GateReportRecord.id).desc())
        .limit(50)
    ).all()
    newest = next((r for r in rows if inputs_match(r.report, eval_shas, reference_sha)), None)
    if newest is None:
        return "unknown", f"no stored {profile.name!r} report for this content: the job's preflight will run the gate"
    if newest.passed:
        return "pass", f"quality gate {profile.name!r} passed on this content (stored report {newest.id})"
    return "fail", (
        f"quality gate {profile.name!r} failed on this content (stored report {newest.id}): "
        f"{failing_summary(newest.report)}; the job's preflight would refuse it unless an admin overrides the gate"
    )

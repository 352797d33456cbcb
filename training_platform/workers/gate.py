"""The preflight gate a worker runs before it starts a training process (job status `preflight`).

Checks: the job config through all three validation layers (`validate_config`: schema, cross-field rules, files /
model / dataset rows / devices), the tokenizer has a pad or eos token (padding needs one), and the data directory
has at least `settings.min_free_disk_mb` free. The report is stored on `job.preflight`:

    {"ok": bool, "checks": [{"name", "ok", "detail"}], "errors": [{"loc", "msg"}]}

It reads the datasets and the model/tokenizer configs once (a few seconds, transformers import included), never
loads weights.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any


def _check(name: str, ok: bool, detail: str) -> dict[str, Any]:
    return {"name": name, "ok": ok, "detail": detail}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def check_tokenizer(model_ref: str, trust_remote_code: bool = False) -> tuple[bool, str]:
    from transformers import AutoTokenizer

    from training_platform.training.preflight import resolve_model_ref

    ref, _ = resolve_model_ref(model_ref)
    try:
        tokenizer = AutoTokenizer.from_pretrained(ref, trust_remote_code=trust_remote_code)
    except Exception as exc:  # noqa: BLE001 - any loading failure is the user's problem to see
        return False, f"cannot load the tokenizer from {ref}: {_first_line(exc)}"
    pad, eos = tokenizer.pad_token, tokenizer.eos_token
    if pad is None and eos is None:
        return False, "the tokenizer has neither a pad token nor an eos token (batches cannot be padded)"
    return True, f"pad_token={pad!r}, eos_token={eos!r}"


def check_disk(path: Path, min_free_mb: int) -> tuple[bool, str]:
    path.mkdir(parents=True, exist_ok=True)
    free_mb = shutil.disk_usage(path).free // 2**20
    if free_mb < min_free_mb:
        return False, f"{free_mb} MB free in {path}, need at least {min_free_mb} MB (TP_MIN_FREE_DISK_MB)"
    return True, f"{free_mb} MB free in {path} (minimum {min_free_mb} MB)"


GATE_OVERRIDE_PREFIX = "gate override by "  # the job event an admin's override leaves (api/routes/gates.py)


def gate_dir(data_dir: Path, job_id: int) -> Path:
    """Where the preflight hands the gate report (and an override) to the training process (TP_GATE_REPORTS_DIR)."""
    return data_dir / "runs" / f"job-{job_id}.gates"


def gate_override(job_id: int) -> dict[str, Any] | None:
    """The latest admin override of this job's quality gate (a job event), or None."""
    from sqlmodel import col, select

    from training_platform.db.models import JobEvent
    from training_platform.db.session import session_scope

    with session_scope() as session:
        event = session.exec(
            select(JobEvent)
            .where(JobEvent.job_id == job_id, JobEvent.reason.startswith(GATE_OVERRIDE_PREFIX))
            .order_by(col(JobEvent.id).desc())
            .limit(1)
        ).first()
        if event is None:
            return None
        who, _, reason = event.reason.removeprefix(GATE_OVERRIDE_PREFIX).partition(": ")
        return {
            "job_id": job_id,
            "by": who,
            "reason": reason.removesuffix(" (re-queued)"),
            "event_id": event.id,
            "at": event.ts.isoformat(timespec="seconds"),
        }


def check_data_gate(cfg, *, job_id: int | None, data_dir: Path) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """`data.gate`: a passing report for exactly this content (the dataset version's sha256) and profile (name +
    hash) and inputs, else the gate is run now (and stored for the version); failing without an admin override ->
    an error at `data.gate` naming the failing checks. The report (and override) go to `gate_dir` for the run."""
    import json
    import shutil

    from training_platform.core.files import sha256_file
    from training_platform.core.paths import resolve_data_path
    from training_platform.core.settings import get_settings
    from training_platform.data.gate import GateError
    from training_platform.db.session import session_scope
    from training_platform.services import gates as gate_service
    from training_platform.training.gate_check import OVERRIDE_FILE, SHADOW_FILE, failing_summary, shadow_rule

    settings = get_settings()
    gate = cfg.data.gate
    train = resolve_data_path(cfg.data.train_file)
    eval_shas = [sha256_file(resolve_data_path(p)) for p in gate.eval_sets]
    reference_sha = sha256_file(resolve_data_path(gate.reference)) if gate.reference else None
    with session_scope() as session:
        try:
            profile = gate_service.resolve_profile(session, settings, gate.profile, loc="data.gate.profile")
        except GateError as exc:
            return _check("gate", False, str(exc)), [{"loc": loc, "msg": msg} for loc, msg in exc.errors]
        version = gate_service.version_for_file(session, train, settings)
        sha = sha256_file(train)
        found = gate_service.passing_report(session, sha, profile, eval_shas, reference_sha)
        report, report_id = (found.report, found.id) if found is not None else (None, None)
        version_id = version.id if version is not None else None
    how = f"stored report {report_id}"
    if report is None:
        report = gate_service.run_on_file(
            train,
            profile,
            settings,
            eval_sets=gate.eval_sets,
            reference=gate.reference,
            fmt=None if cfg.data.format == "auto" else cfg.data.format,
        )
        how = "run now"
        if version_id is not None:
            from training_platform.db.models import DatasetVersionRecord

            with session_scope() as session:
                stored = session.get(DatasetVersionRecord, version_id)
                if stored is not None and stored.sha256 == report["dataset"]["sha256"]:
                    report["dataset"]["path"] = stored.path
                    report_id = gate_service.store_report(session, stored, report, job_id).id
                    how = f"run now, stored as report {report_id}"
    shadow, shadow_problem = None, None
    min_spearman = shadow_rule(profile, cfg)
    if min_spearman is not None:
        shadow, shadow_problem = find_shadow_approval(cfg, profile.name, min_spearman, job_id)
    failing = not report["passed"] or shadow_problem is not None
    override = gate_override(job_id) if job_id is not None and failing else None
    if job_id is not None:
        handover = gate_dir(data_dir, job_id)
        shutil.rmtree(handover, ignore_errors=True)
        handover.mkdir(parents=True)
        (handover / f"{profile.name}.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
        if shadow is not None:
            (handover / SHADOW_FILE).write_text(json.dumps(shadow, indent=2, default=str) + "\n")
        if override is not None:
            override = {
                **override,
                "profile": profile.name,
                "profile_hash": profile.hash,
                "report_id": report_id,
                "failed_checks": report["failed"],
                "dataset_sha256": report["dataset"]["sha256"],
            }
            (handover / OVERRIDE_FILE).write_text(json.dumps(override, indent=2) + "\n")
    where = f"version {version_id}" if version_id is not None else "the train file (not a dataset version)"
    shadow_note = f"; rewards approved by {shadow['approved_by']}" if shadow is not None else ""
    if not failing:
        return _check("gate", True, f"{profile.name} passed on {where} ({how}){shadow_note}"), []
    errors = []
    if not report["passed"]:
        errors.append(
            {
                "loc": "data.gate",
                "msg": f"quality gate {profile.name!r} failed on {where} ({how}): {failing_summary(report)}",
            }
        )
    if shadow_problem is not None:
        errors.append({"loc": "rewards", "msg": shadow_problem})
    summary = "; ".join(e["msg"] for e in errors)
    if override is not None:
        return _check(
            "gate", True, f"{profile.name} FAILED: {summary}; overridden by {override['by']}: {override['reason']}"
        ), []
    return _check("gate", False, summary), errors


SHADOW_SEARCH_LIMIT = 500  # the owner's most recent succeeded shadow tests looked at


def find_shadow_approval(
    cfg, profile_name: str, min_spearman: float, job_id: int | None
) -> tuple[dict[str, Any] | None, str | None]:
    """A passing reward shadow report approving this job's reward set -> (report + `approved_by`, None), or (None,
    why not). From data.gate.reward_shadow_report when given, else the job owner's succeeded shadow-test jobs."""
    from sqlmodel import col, select

    from training_platform.db.models import Job
    from training_platform.db.session import session_scope
    from training_platform.training.config import ConfigError
    from training_platform.training.gate_check import job_rewards, offline_shadow_report
    from training_platform.training.rewards.shadow import SHADOW_OPERATION, approval_problem

    if cfg.data.gate.reward_shadow_report is not None or job_id is None:
        try:
            report = offline_shadow_report(cfg, profile_name, min_spearman)
        except ConfigError as exc:
            return None, "; ".join(e.reason for e in exc.errors)
        return {**report, "approved_by": f"the file {cfg.data.gate.reward_shadow_report}"}, None
    rewards = job_rewards(cfg)
    with session_scope() as session:
        job = session.get(Job, job_id)
        if job is None:  # deleted meanwhile: run_preflight reports the gate as unable to run
            raise RuntimeError(f"job {job_id} no longer exists")
        owner = job.owner_id
        rows = session.exec(
            select(Job.id, Job.config)
            .where(
                Job.owner_id == owner, Job.kind == "data", Job.status == "succeeded", Job.algorithm == SHADOW_OPERATION
            )
            .order_by(col(Job.id).desc())
            .limit(SHADOW_SEARCH_LIMIT)
        ).all()
    latest = None
    for shadow_job, config in rows:
        shadow_report: Any = (config or {}).get("result")  # stored JSON: approval_problem checks its shape
        problem = approval_problem(shadow_report, rewards, min_spearman=min_spearman)
        if problem is None:
            return {**shadow_report, "approved_by": f"shadow test job {shadow_job}", "shadow_job_id": shadow_job}, None
        latest = latest or f"the latest, job {shadow_job}: {problem}"
    names = ", ".join(f"{r['name']}×{r['weight']:g}" for r in rewards)
    return None, (
        f"gate profile {profile_name!r} requires a passing reward shadow report (spearman >= "
        f"{min_spearman}) whose new scorer is this job's reward set ({names}); "
        + (
            f"none of your {len(rows)} succeeded shadow tests approves it ({latest})"
            if rows
            else "you have no succeeded shadow test"
        )
        + "; run POST /api/v1/rewards/shadow with these rewards as `new`"
    )


def run_preflight(
    raw_config: dict, *, data_dir: Path, min_free_disk_mb: int, job_id: int | None = None
) -> dict[str, Any]:
    """Run every check (none stops the others) and return the report."""
    from training_platform.training.config import ConfigError, parse_config
    from training_platform.training.preflight import validate_config

    checks: list[dict[str, Any]] = []
    errors: list[dict[str, str]] = []
    started = time.perf_counter()

    cfg = None
    loaded: dict[str, Any] = {}
    try:
        cfg = validate_config(raw_config, loaded=loaded)
        checks.append(
            _check(
                "config",
                True,
                f"{cfg.algorithm.name} (engine {cfg.engine}): schema, rules, files, model and dataset rows are valid",
            )
        )
    except ConfigError as exc:
        errors += [{"loc": e.path, "msg": e.reason} for e in exc.errors]
        checks.append(
            _check("config", False, f"{len(exc.errors)} error(s): " + "; ".join(str(e) for e in exc.errors[:5]))
        )
    except Exception as exc:  # noqa: BLE001 - a validator crash must fail the job loudly, not the worker
        errors.append({"loc": "<config>", "msg": f"validation crashed: {type(exc).__name__}: {_first_line(exc)}"})
        checks.append(_check("config", False, "validation crashed"))

    if "memory" in loaded:  # the estimate the config check judged (a refusal is an error at `resources`)
        checks.append(_check("memory", True, f"estimated peak {loaded['memory']['summary']}"))
    for probe in loaded.get("judge_probe", []):  # llm_judge rewards: one real call each (training/preflight.py)
        checks.append(
            _check(
                f"judge_probe[{probe['reward_index']}]",
                bool(probe.get("ok")),
                f"endpoint {probe.get('endpoint')!r} model {probe.get('model')!r}: "
                + (
                    f"score {probe.get('score')} in {probe.get('latency_ms')} ms"
                    if probe.get("ok")
                    else f"no score: {probe.get('error')}"
                ),
            )
        )

    model_ok = cfg is not None
    if cfg is None:  # the layers failed somewhere: still check the tokenizer if the model path itself is fine
        try:
            cfg = parse_config(raw_config)
        except ConfigError:
            cfg = None
        model_ok = cfg is not None and not any(e["loc"].startswith("model.path") for e in errors)
    if model_ok and cfg is not None:  # model_ok implies a config
        ok, detail = check_tokenizer(cfg.model.path, cfg.model.trust_remote_code)
        checks.append(_check("tokenizer", ok, detail))
        if not ok:
            errors.append({"loc": "model.path", "msg": detail})
    else:
        checks.append(_check("tokenizer", False, "skipped: the model could not be checked"))

    if cfg is not None and model_ok and not errors and getattr(cfg.data, "gate", None) is not None:
        try:
            check, gate_errors = check_data_gate(cfg, job_id=job_id, data_dir=data_dir)
        except Exception as exc:  # noqa: BLE001 - a gate that cannot run refuses the job, loudly
            check = _check("gate", False, f"the gate could not run: {type(exc).__name__}: {_first_line(exc)}")
            gate_errors = [{"loc": "data.gate", "msg": check["detail"]}]
        checks.append(check)
        errors += gate_errors

    ok, detail = check_disk(data_dir, min_free_disk_mb)
    checks.append(_check("disk", ok, detail))
    if not ok:
        errors.append({"loc": "TP_DATA_DIR", "msg": detail})

    # What a check quotes (an exception's text) shows paths relative to the data dir, never the server's.
    prefix = str(data_dir).rstrip("/") + "/"
    for item in (*checks, *errors):
        for key in ("detail", "msg"):
            if isinstance(item.get(key), str):
                item[key] = item[key].replace(prefix, "").replace(str(data_dir), "TP_DATA_DIR")
    return {
        "ok": not errors and all(c["ok"] for c in checks),
        "checks": checks,
        "errors": errors,
        "seconds": round(time.perf_counter() - started, 3),
    }


def summarize(report: dict[str, Any], limit: int = 5) -> str:
    """One line for job.error: the first few `loc: msg` of a failed report."""
    items = [f"{e['loc']}: {e['msg']}" for e in report.get("errors", [])]
    more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
    return "; ".join(items[:limit]) + more

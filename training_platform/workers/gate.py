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


def run_preflight(raw_config: dict, *, data_dir: Path, min_free_disk_mb: int) -> dict[str, Any]:
    """Run every check (none stops the others) and return the report."""
    from training_platform.training.config import ConfigError, parse_config, validate_config

    checks: list[dict[str, Any]] = []
    errors: list[dict[str, str]] = []
    started = time.perf_counter()

    cfg = None
    try:
        cfg = validate_config(raw_config)
        checks.append(_check("config", True, f"{cfg.algorithm.name} (engine {cfg.engine}): schema, rules, files, "
                                             "model and dataset rows are valid"))
    except ConfigError as exc:
        errors += [{"loc": e.path, "msg": e.reason} for e in exc.errors]
        checks.append(_check("config", False, f"{len(exc.errors)} error(s): "
                                              + "; ".join(str(e) for e in exc.errors[:5])))
    except Exception as exc:  # noqa: BLE001 - a validator crash must fail the job loudly, not the worker
        errors.append({"loc": "<config>", "msg": f"validation crashed: {type(exc).__name__}: {_first_line(exc)}"})
        checks.append(_check("config", False, "validation crashed"))

    model_ok = cfg is not None
    if cfg is None:  # the layers failed somewhere: still check the tokenizer if the model path itself is fine
        try:
            cfg = parse_config(raw_config)
        except ConfigError:
            cfg = None
        model_ok = cfg is not None and not any(e["loc"].startswith("model.path") for e in errors)
    if model_ok:
        ok, detail = check_tokenizer(cfg.model.path, cfg.model.trust_remote_code)
        checks.append(_check("tokenizer", ok, detail))
        if not ok:
            errors.append({"loc": "model.path", "msg": detail})
    else:
        checks.append(_check("tokenizer", False, "skipped: the model could not be checked"))

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
    return {"ok": not errors and all(c["ok"] for c in checks), "checks": checks, "errors": errors,
            "seconds": round(time.perf_counter() - started, 3)}


def summarize(report: dict[str, Any], limit: int = 5) -> str:
    """One line for job.error: the first few `loc: msg` of a failed report."""
    items = [f"{e['loc']}: {e['msg']}" for e in report.get("errors", [])]
    more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
    return "; ".join(items[:limit]) + more

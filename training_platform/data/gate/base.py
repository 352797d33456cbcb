"""Quality gates: a named profile of checks with thresholds, run on a dataset file, giving a report with every
check's measured value, threshold and verdict (`pass`, `fail`, or `skipped` with the reason when a check does not
apply: no reference given, rows without the metadata fields, no eval sets).

The checks reuse the data factory's measures (nothing is reimplemented):

- `distinct_2`        distinct-2 of the rows' text (`report._Diversity`, the audit report's definition) >= `min`
- `ngram_divergence`  KL(dataset || reference) of the word n-gram (n=3) distributions (`report._Diversity` counts),
                      in bits, the reference's distribution additively smoothed (`smoothing`) over the union of
                      n-grams; >= `min_kl` (the data must not be a copy of the reference). Skipped without a reference
- `duplicates`        exact + near duplicate rate (`dedup.find_duplicates`: removed rows / rows) <= `max_rate`
- `length_bounds`     tokens per text field (whitespace words, or the tokenizer given) inside [min, max]; the share of
                      rows with a field outside <= `max_outside_share`
- `metadata_coverage` distinct values of declared metadata fields (top level or under `metadata`), each >= its
                      minimum; a field no row carries is skipped (the whole check when none is carried)
- `leakage`           rows leaked into the eval sets: n-gram overlap (`contamination.find_contamination`) or MinHash
                      similarity (`dedup.MinHasher`, LSH + estimated Jaccard) >= `minhash_threshold` with an eval
                      row; <= `max_leaked`. Skipped without eval sets
- `difficulty_mix`    share of hard rows >= `min_hard`, of easy rows <= `max_easy` (the audit report's buckets)
- `schema`            rows failing the format's validation (`validate.validate_file`) <= `max_bad_rows`
- `reward_shadow`     not about the data: a training job under this profile may use a reward set only once a passing
                      shadow report (`tp rewards shadow` / `POST /rewards/shadow`) names it as its `new` scorer
                      with Spearman >= `min_spearman` (training/gate_check.py); skipped when a dataset is gated

To add a check: one module `data/gate/checks/x.py` with `class XParams(CheckParams)` (its thresholds, with bounds)
and `def check_x(ctx: GateContext, params: XParams) -> Outcome` decorated with `@register_check("x", XParams,
"description")`, plus its import in `data/gate/checks/__init__.py`; profiles can then name it. A profile's hash is
the sha256 of its canonical JSON (name + checks with every parameter filled in), so a report names exactly what it
was judged by.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from training_platform.core.errors import InvalidInput, pydantic_errors
from training_platform.core.files import sha256_file
from training_platform.core.settings import current_settings

GATE_REPORT_VERSION = 1
MAX_EVAL_SETS = 20
MAX_METADATA_FIELDS = 32
MAX_DISTINCT_TRACKED = 100_000  # distinct metadata values counted per field (beyond: "at least")
PROFILE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
ProfileName = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=PROFILE_NAME_PATTERN)]
Verdict = Literal["pass", "fail", "skipped"]


class GateError(InvalidInput):
    """Bad gate input (profile, files): [(loc, msg)]."""


# ---------------------------------------------------------------------------------------------- registry


class CheckParams(BaseModel):
    model_config = ConfigDict(extra="forbid")


@dataclass
class Outcome:
    verdict: Verdict
    value: Any = None
    threshold: str | None = None
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class CheckSpec:
    name: str
    params: type[CheckParams]
    fn: Callable[[GateContext, Any], Outcome]
    description: str


CHECKS: dict[str, CheckSpec] = {}


def register_check(name: str, params: type[CheckParams], description: str):
    def wrap(fn):
        CHECKS[name] = CheckSpec(name, params, fn, description)
        return fn

    return wrap


# ---------------------------------------------------------------------------------------------- profiles


class GateProfile(BaseModel):
    """A named set of checks, each with its parameters/thresholds (every parameter filled in)."""

    model_config = ConfigDict(extra="forbid")
    name: ProfileName
    description: str = Field("", max_length=2000)
    checks: dict[str, dict[str, Any]]

    @property
    def hash(self) -> str:
        return profile_hash(self)

    def public(self, source: str) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "checks": self.checks,
            "hash": self.hash,
            "source": source,
        }


def profile_hash(profile: GateProfile) -> str:
    canonical = json.dumps(
        {"name": profile.name, "checks": profile.checks}, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def parse_profile(name: str, raw: Any, *, loc: str = "") -> GateProfile:
    """A profile from its JSON/YAML form {"description", "checks": {check: {param: value}}}: every check known,
    every parameter valid (filled in with defaults). Raises GateError naming each problem's field path."""
    prefix = f"{loc}." if loc else ""
    if not isinstance(raw, dict):
        raise GateError([(loc or "<profile>", f"must be an object, got {type(raw).__name__}")])
    errors: list[tuple[str, str]] = []
    unknown = sorted(set(raw) - {"description", "checks", "name"})
    errors += [(f"{prefix}{k}", "unknown field; use description, checks") for k in unknown]
    if "name" in raw and raw["name"] != name:
        errors.append((f"{prefix}name", f"does not match the profile's name {name!r}"))
    checks = raw.get("checks")
    normalized: dict[str, dict[str, Any]] = {}
    if not isinstance(checks, dict) or not checks:
        errors.append((f"{prefix}checks", f"must be a non-empty object of checks ({', '.join(CHECKS)})"))
    else:
        for check_name, params in checks.items():
            where = f"{prefix}checks.{check_name}"
            spec = CHECKS.get(check_name)
            if spec is None:
                errors.append((where, f"unknown check; use one of {', '.join(CHECKS)}"))
                continue
            if params is None:
                params = {}
            try:
                normalized[check_name] = spec.params.model_validate(params).model_dump(mode="json")
            except ValidationError as exc:
                errors += pydantic_errors(exc, prefix=where, known_fields=spec.params.model_fields)
    description = raw.get("description", "")
    try:
        profile = GateProfile(name=name, description=description if description is not None else "", checks=normalized)
    except ValidationError as exc:
        errors += pydantic_errors(exc, prefix=loc or "<profile>")
        profile = None
    if errors:
        raise GateError(errors)
    assert profile is not None  # a profile that failed validation added its errors
    return profile


_DEFAULT_CHECKS: dict[str, dict[str, Any]] = {
    "schema": {},
    "distinct_2": {},
    "ngram_divergence": {},
    "duplicates": {},
    "length_bounds": {},
    "metadata_coverage": {},
    "leakage": {},
}
BUILTIN_RAW: dict[str, dict[str, Any]] = {
    "default": {
        "description": "Schema, diversity (distinct-2 >= 0.6), divergence from a reference (KL >= 0.15), "
        "duplicates <= 2%, lengths, metadata coverage, no leaked eval rows.",
        "checks": _DEFAULT_CHECKS,
    },
    "strict": {
        "description": "default + a difficulty mix of hard >= 30% and easy <= 30%.",
        "checks": {**_DEFAULT_CHECKS, "difficulty_mix": {"min_hard": 0.3, "max_easy": 0.3}},
    },
}


def builtin_profiles() -> dict[str, GateProfile]:
    return {name: parse_profile(name, raw) for name, raw in BUILTIN_RAW.items()}


def load_profiles_file(path: str | Path) -> dict[str, GateProfile]:
    """The operator's profiles (TP_GATE_PROFILES_FILE): YAML `{profiles: {name: {description, checks}}}` (or the
    name -> profile mapping alone). A built-in name cannot be redefined."""
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise GateError([("TP_GATE_PROFILES_FILE", f"cannot read {path}: {exc}")]) from None
    if isinstance(data, dict) and "profiles" in data:
        data = data["profiles"]
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise GateError([("TP_GATE_PROFILES_FILE", "must map profile names to {description, checks}")])
    out, errors = {}, []
    for name, raw in data.items():
        if name in BUILTIN_RAW:
            errors.append((f"TP_GATE_PROFILES_FILE.{name}", "a built-in profile's name; choose another"))
            continue
        try:
            out[str(name)] = parse_profile(str(name), raw, loc=f"TP_GATE_PROFILES_FILE.{name}")
        except GateError as exc:
            errors += exc.errors
    if errors:
        raise GateError(errors)
    return out


def local_profiles(profiles_file: str | None = None) -> dict[str, tuple[GateProfile, str]]:
    """Built-in and file profiles: name -> (profile, source `builtin` | `file`). The file defaults to
    $TP_GATE_PROFILES_FILE."""
    profiles = {name: (p, "builtin") for name, p in builtin_profiles().items()}
    profiles_file = profiles_file if profiles_file is not None else current_settings().gate_profiles_file
    if profiles_file:
        profiles.update({name: (p, "file") for name, p in load_profiles_file(profiles_file).items()})
    return profiles


def resolve_local_profile(name: str, profiles_file: str | None = None) -> GateProfile:
    profiles = local_profiles(profiles_file)
    if name not in profiles:
        raise GateError([("profile", f"unknown gate profile {name!r}; use one of {', '.join(sorted(profiles))}")])
    return profiles[name][0]


# ---------------------------------------------------------------------------------------------- context


class GateContext:
    """What the checks read: the dataset file (streamed, several passes), its format, the eval sets and reference,
    the tokenizer; shared measures computed once and cached."""

    def __init__(
        self,
        path: Path,
        *,
        fmt: str | None,
        eval_sets: list[Path],
        reference: Path | None,
        tokenizer: Any = None,
        limits: Any = None,
    ):
        self.path, self.fmt, self.eval_sets, self.reference = path, fmt, eval_sets, reference
        self.tokenizer, self.limits = tokenizer, limits
        self._cache: dict[str, Any] = {}

    def records(self):
        from training_platform.data.io import iter_records

        return iter_records(self.path, self.limits)

    def rows(self) -> Iterator[Any]:
        """The parseable rows (unparseable lines are the `schema` check's business)."""
        for record in self.records():
            if record.error is None:
                yield record.row

    def cached(self, key: str, compute: Callable[[], Any]) -> Any:
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]

    @property
    def row_count(self) -> int:
        return self.cached("rows", lambda: sum(1 for _ in self.rows()))

    def texts(self) -> Iterator[str]:
        from training_platform.data.text import row_text

        for row in self.rows():
            yield row_text(row, self.fmt)

    def token_counts(self, texts: list[str]) -> list[int]:
        if self.tokenizer is None:
            return [len(t.split()) for t in texts]
        return [len(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]

    @property
    def token_unit(self) -> dict[str, Any]:
        if self.tokenizer is None:
            return {"unit": "whitespace words", "tokenizer": None}
        return {"unit": "tokenizer tokens", "tokenizer": str(getattr(self.tokenizer, "name_or_path", "?"))}


def at_least(value: float, limit: float) -> bool:
    return value >= limit - 1e-12


def at_most(value: float, limit: float) -> bool:
    return value <= limit + 1e-12


# ---------------------------------------------------------------------------------------------- running


def run_gate(
    source: str | Path | list[Any],
    profile: GateProfile,
    *,
    eval_sets: list[str | Path] | None = None,
    reference: str | Path | None = None,
    tokenizer: Any = None,
    fmt: str | None = None,
    limits: Any = None,
    shown: Callable[[Path], str] | None = None,
) -> dict[str, Any]:
    """Run every check of `profile` on a dataset file (or a list of rows) -> the gate report (JSON-able).

    Report: {gate_report_version, passed, failed: [check names], skipped: [...], checks: [{name, verdict, value,
    threshold, detail, params, seconds}], profile: {name, hash, checks}, dataset: {path, sha256, rows, format},
    eval_sets: [{path, sha256}], reference, tokens: {unit, tokenizer}, created_at, seconds}. `shown` maps paths to
    what the report shows (e.g. relative to TP_DATA_DIR)."""
    from training_platform.data.report import _detect

    eval_paths = [Path(p) for p in (eval_sets or [])]
    if len(eval_paths) > MAX_EVAL_SETS:
        raise GateError([("eval_sets", f"at most {MAX_EVAL_SETS} eval sets")])
    errors = [(f"eval_sets[{i}]", f"no such file: {p}") for i, p in enumerate(eval_paths) if not p.is_file()]
    reference = Path(reference) if reference is not None else None
    if reference is not None and not reference.is_file():
        errors.append(("reference", f"no such file: {reference}"))
    if errors:
        raise GateError(errors)
    show = shown or str
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tp-gate-") as tmp:
        if isinstance(source, list):
            path = Path(tmp) / "rows.jsonl"
            path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in source), encoding="utf-8")
            shown_path = "<rows>"
        else:
            path = Path(source)
            if not path.is_file():
                raise GateError([("input", f"no such file: {path}")])
            shown_path = show(path)
        if isinstance(tokenizer, str | Path):
            from training_platform.data.tokenizer import load_tokenizer

            tokenizer = load_tokenizer(tokenizer)
        try:
            detected = _detect(path, fmt)
        except Exception:  # noqa: BLE001 - an unparseable first line: the schema check reports it
            detected = fmt
        ctx = GateContext(
            path, fmt=detected, eval_sets=eval_paths, reference=reference, tokenizer=tokenizer, limits=limits
        )
        results = []
        for name, raw_params in profile.checks.items():
            spec = CHECKS[name]
            params = spec.params.model_validate(raw_params)
            started = time.perf_counter()
            try:
                outcome = spec.fn(ctx, params)
            except GateError:
                raise
            except Exception as exc:  # noqa: BLE001 - a check that cannot run fails, loudly, with why
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                outcome = Outcome("fail", None, None, f"the check could not run: {type(exc).__name__}: {first}")
            item = {
                "name": name,
                "verdict": outcome.verdict,
                "value": outcome.value,
                "threshold": outcome.threshold,
                "detail": outcome.detail,
                "params": raw_params,
                "seconds": round(time.perf_counter() - started, 3),
            }
            if outcome.verdict == "skipped":
                item["reason"] = outcome.detail
            item.update(outcome.extra)
            results.append(item)
        sha = sha256_file(path)
        rows = ctx.row_count
    failed = [r["name"] for r in results if r["verdict"] == "fail"]
    return {
        "gate_report_version": GATE_REPORT_VERSION,
        "passed": not failed,
        "failed": failed,
        "skipped": [r["name"] for r in results if r["verdict"] == "skipped"],
        "checks": results,
        "profile": {"name": profile.name, "hash": profile.hash, "checks": profile.checks},
        "dataset": {"path": shown_path, "sha256": sha, "rows": rows, "format": detected},
        "eval_sets": [{"path": show(p), "sha256": sha256_file(p)} for p in eval_paths],
        "reference": {"path": show(reference), "sha256": sha256_file(reference)} if reference is not None else None,
        "tokens": ctx.token_unit,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "seconds": round(time.perf_counter() - t0, 3),
    }


def inputs_match(report: dict[str, Any], eval_sets_sha: list[str], reference_sha: str | None) -> bool:
    """The report was computed against exactly these eval sets and reference (by content)."""
    mine = sorted(e.get("sha256") for e in report.get("eval_sets") or [])
    ref = (report.get("reference") or {}).get("sha256")
    return mine == sorted(eval_sets_sha) and ref == reference_sha


def summary_line(report: dict[str, Any]) -> str:
    parts = []
    for check in report["checks"]:
        mark = {"pass": "PASS", "fail": "FAIL", "skipped": "SKIP"}[check["verdict"]]
        value = json.dumps(check["value"]) if check["value"] is not None else "-"
        parts.append(
            f"{mark} {check['name']}: {value} ({check['threshold'] or '-'})"
            + (f" - {check['detail']}" if check["verdict"] != "pass" and check["detail"] else "")
        )
    return "\n".join(parts)

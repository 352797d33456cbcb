"""Shadow test of a changed reward: score the same sample with the old and the new scorer and compare.

A SPEC is a reward scorer: one reward (`math_answer`, `length_penalty:max_length=64,buffer=16`,
`{"name": "format", "params": {...}}`) or several (a JSON list, or a YAML/JSON file holding a reward section:
a list of `{name, weight, params}` or a mapping with `rewards:`). Several rewards score their weighted sum, weights
normalised as training does (`rewards/weights.py`, mode normalise).

The data FILE (JSONL/JSON/Parquet/CSV) has one row per scored item: `prompt` and `completion` (text or chat
messages) and whatever columns the rewards read (e.g. `answer`). A seeded sample of at most `limit` rows
(reservoir sampling: memory is bounded whatever the file's size) is scored `repeats` times by each scorer.

Report:
- spearman / kendall (tau-b): rank correlation of the two scorers' mean scores over the items (scipy.stats);
  null when one scorer gives every item the same score (no ranking to compare).
- top_k_overlap: |top-k(old) & top-k(new)| / k (ties broken by row order).
- per scorer: mean per-item variance across the repeats (sample variance, ddof 1; deterministic scorers give 0),
  the share of items whose variance is > 0.08 (`unstable_share`) and those items.
- verdict: pass when spearman >= min_spearman and the new scorer's unstable share <= max_unstable_share.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from training_platform.core.errors import InvalidInput, translate_pydantic_error
from training_platform.core.files import yaml_load

UNSTABLE_VARIANCE = 0.08
SHADOW_OPERATION = "reward_shadow"  # a shadow test's data job: config.operation and jobs.algorithm
MAX_LIMIT = 100_000
MAX_REPEATS = 50
MAX_TOP_K = 10_000
BATCH = 64


class ShadowInputError(InvalidInput):
    """Bad input (spec, data, bounds): `errors` are (field, reason)."""


# ---------------------------------------------------------------------------------------------- specs


def _spec_entries(spec: Any, field: str) -> list[dict]:
    """A SPEC (string or already-parsed data) -> a list of raw reward entries."""
    if isinstance(spec, str):
        text = spec.strip()
        if not text:
            raise ShadowInputError([(field, "empty reward spec")])
        if len(text) > 100_000:
            raise ShadowInputError([(field, "the reward spec is longer than 100000 characters")])
        path = Path(text)
        if text.endswith((".yaml", ".yml", ".json")) and "\n" not in text:
            if not path.is_file():
                raise ShadowInputError([(field, f"no such file: {text}")])
            if path.stat().st_size > 1_000_000:
                raise ShadowInputError([(field, f"{text}: a reward spec file must be < 1 MB")])
            try:
                spec = yaml_load(path.read_text(encoding="utf-8"))
            except Exception as exc:  # noqa: BLE001 - YAML/JSON syntax: reported as bad input
                raise ShadowInputError([(field, f"cannot parse {text}: {exc}")]) from None
        elif text[0] in "[{":
            try:
                spec = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ShadowInputError([(field, f"invalid JSON: {exc}")]) from None
        else:
            name, _, rest = text.partition(":")
            params: dict[str, Any] = {}
            for item in filter(None, (p.strip() for p in rest.split(","))):
                key, eq, value = item.partition("=")
                if not eq or not key.strip():
                    raise ShadowInputError([(field, f"expected name:key=value,..., got {item!r}")])
                try:
                    params[key.strip()] = yaml_load(value) if value.strip() else ""
                except Exception as exc:  # noqa: BLE001
                    raise ShadowInputError(
                        [(f"{field}.params.{key.strip()}", f"cannot parse {value!r}: {exc}")]
                    ) from None
            spec = {"name": name.strip(), "params": params}
    if isinstance(spec, dict) and "rewards" in spec:
        spec = spec["rewards"]
    if isinstance(spec, dict):
        spec = [spec]
    if not isinstance(spec, list) or not spec:
        raise ShadowInputError([(field, "expected a reward, a list of rewards or a mapping with `rewards`")])
    if len(spec) > 32:
        raise ShadowInputError([(field, "at most 32 rewards per scorer")])
    return spec


class Scorer:
    """The weighted sum of one or more built reward functions (weights normalised)."""

    def __init__(self, spec: Any, field: str):
        from pydantic import ValidationError

        from training_platform.training.rewards import REWARDS, RewardSection, build_reward_function
        from training_platform.training.rewards.weights import check_reward_weights

        entries = _spec_entries(spec, field)
        errors: list[tuple[str, str]] = []
        sections: list[RewardSection] = []
        self_params: list[dict] = []  # every parameter filled in: the same reward set reads the same however given
        for i, entry in enumerate(entries):
            where = f"{field}.rewards[{i}]" if len(entries) > 1 else field
            try:
                section = RewardSection.model_validate(entry)
            except ValidationError as exc:
                for e in exc.errors():
                    problem = translate_pydantic_error(e, prefix=where, known_fields=set(RewardSection.model_fields))
                    errors.append((problem.path, problem.reason))
                continue
            definition = REWARDS.get(section.name)
            if definition is None:
                errors.append(
                    (f"{where}.name", f"unknown reward {section.name!r}; known: {', '.join(sorted(REWARDS))}")
                )
                continue
            try:
                filled = definition.params_model.model_validate(section.params).model_dump(mode="json")
            except ValidationError as exc:
                known = set(definition.params_model.model_fields)
                for e in exc.errors():
                    problem = translate_pydantic_error(e, prefix=f"{where}.params", known_fields=known)
                    errors.append((problem.path, problem.reason))
                continue
            sections.append(section)
            self_params.append(filled)
        if not errors:
            weight_errors, _, weights = check_reward_weights(sections, mode="normalise")
            errors.extend((f"{field}.{p}", r) for p, r in weight_errors)
        if errors:
            raise ShadowInputError(errors)
        self.sections = sections
        self.filled_params = self_params
        self.weights = weights
        self.functions = [build_reward_function(s.name, s.params) for s in sections]

    def describe(self) -> list[dict]:
        return [
            {"name": s.name, "weight": round(w, 6), "params": p}
            for s, w, p in zip(self.sections, self.weights, self.filled_params, strict=True)
        ]

    def __call__(self, prompts: list, completions: list, columns: dict[str, list]) -> np.ndarray:
        total = np.zeros(len(completions))
        seen = np.zeros(len(completions), dtype=bool)
        for fn, weight in zip(self.functions, self.weights, strict=True):
            values = fn(prompts=prompts, completions=completions, **columns)
            if len(values) != len(completions):
                raise RuntimeError(f"reward {fn.name} returned {len(values)} scores for {len(completions)} items")
            for i, v in enumerate(values):
                if v is not None and math.isfinite(float(v)):
                    total[i] += weight * float(v)
                    seen[i] = True
        return np.where(seen, total, np.nan)  # an item no reward scored is NaN (TRL ignores None too)


# ---------------------------------------------------------------------------------------------- data


def sample_rows(path: str | Path, *, limit: int, seed: int) -> tuple[list[dict], int]:
    """A seeded reservoir sample of at most `limit` rows (in file order) and the number of rows read."""
    from training_platform.data.formats import DatasetError
    from training_platform.data.io import iter_records

    path = Path(path)
    if not path.is_file():
        raise ShadowInputError([("data", f"no such file: {path}")])
    rng = np.random.default_rng(seed)
    reservoir: list[tuple[int, dict]] = []
    problems: list[tuple[str, str]] = []
    n = 0
    try:
        for record in iter_records(path):
            if record.error is not None:
                problems.append((f"data: line {record.line}", str(record.error)))
            elif not isinstance(record.row, dict) or "prompt" not in record.row or "completion" not in record.row:
                problems.append((f"data: line {record.line}", "each row needs `prompt` and `completion`"))
            if problems:
                if len(problems) >= 5:
                    break
                continue
            if n < limit:
                reservoir.append((n, record.row))
            else:
                j = int(rng.integers(0, n + 1))
                if j < limit:
                    reservoir[j] = (n, record.row)
            n += 1
    except DatasetError as exc:  # the reader's limits (row size, file size)
        raise ShadowInputError([("data", str(exc))]) from None
    if problems:
        raise ShadowInputError(problems)
    if n == 0:
        raise ShadowInputError([("data", f"{path} has no rows")])
    reservoir.sort(key=lambda item: item[0])
    return [row for _, row in reservoir], n


# ---------------------------------------------------------------------------------------------- statistics


def _finite(value: float) -> float | None:
    return round(float(value), 6) if value is not None and math.isfinite(float(value)) else None


def rank_correlations(a: Sequence[float], b: Sequence[float]) -> tuple[float | None, float | None]:
    """(Spearman rho, Kendall tau-b); None when either side is constant or fewer than 2 items."""
    from scipy import stats

    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if len(x) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None, None
    return _finite(stats.spearmanr(x, y).statistic), _finite(stats.kendalltau(x, y).statistic)


def top_k_overlap(a: Sequence[float], b: Sequence[float], k: int) -> float:
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    k = min(k, len(x))
    if k == 0:
        return 0.0
    top_a = set(np.argsort(-x, kind="stable")[:k].tolist())
    top_b = set(np.argsort(-y, kind="stable")[:k].tolist())
    return round(len(top_a & top_b) / k, 6)


def _stability(scores: np.ndarray, threshold: float) -> dict[str, Any]:
    """scores: repeats x items."""
    if scores.shape[0] < 2:
        return {
            "mean_variance": 0.0,
            "max_variance": 0.0,
            "unstable_share": 0.0,
            "unstable_items": [],
            "note": "one call per item: variance needs --repeats >= 2",
        }
    var = np.nanvar(scores, axis=0, ddof=1)
    var = np.where(np.isfinite(var), var, 0.0)
    unstable = np.flatnonzero(var > threshold)
    return {
        "mean_variance": round(float(var.mean()), 6),
        "max_variance": round(float(var.max()), 6),
        "unstable_share": round(len(unstable) / scores.shape[1], 6),
        "unstable_items": unstable[:100].tolist(),
    }


# ---------------------------------------------------------------------------------------------- the test


def shadow_report(
    old: Any,
    new: Any,
    data: str | Path,
    *,
    limit: int = 500,
    repeats: int = 3,
    seed: int = 0,
    top_k: int = 10,
    min_spearman: float = 0.8,
    max_unstable_share: float = 0.0,
    unstable_variance: float = UNSTABLE_VARIANCE,
    on_progress=None,
) -> dict[str, Any]:
    """Score a seeded sample of `data` with both scorers, `repeats` calls each; the report (module docstring)."""
    errors = []
    if not 1 <= limit <= MAX_LIMIT:
        errors.append(("limit", f"must be in 1..{MAX_LIMIT}, got {limit}"))
    if not 1 <= repeats <= MAX_REPEATS:
        errors.append(("repeats", f"must be in 1..{MAX_REPEATS}, got {repeats}"))
    if not 1 <= top_k <= MAX_TOP_K:
        errors.append(("top_k", f"must be in 1..{MAX_TOP_K}, got {top_k}"))
    if not -1 <= min_spearman <= 1:
        errors.append(("min_spearman", f"must be in -1..1, got {min_spearman}"))
    if not 0 <= max_unstable_share <= 1:
        errors.append(("max_unstable_share", f"must be in 0..1, got {max_unstable_share}"))
    if not 0 <= seed < 2**32:
        errors.append(("seed", f"must be in 0..2^32-1, got {seed}"))
    scorers: dict[str, Scorer] = {}
    for field, spec in (("old", old), ("new", new)):
        try:
            scorers[field] = Scorer(spec, field)
        except ShadowInputError as exc:
            errors.extend(exc.errors)
    if errors:
        raise ShadowInputError(errors)
    rows, total_rows = sample_rows(data, limit=limit, seed=seed)
    prompts = [r["prompt"] for r in rows]
    completions = [r["completion"] for r in rows]
    column_names = sorted({k for r in rows for k in r} - {"prompt", "completion"})
    columns = {k: [r.get(k) for r in rows] for k in column_names}

    scores: dict[str, np.ndarray] = {}
    done, work = 0, 2 * repeats
    for field, scorer in scorers.items():
        runs = []
        for _ in range(repeats):
            parts = [
                scorer(
                    prompts[i : i + BATCH],
                    completions[i : i + BATCH],
                    {k: v[i : i + BATCH] for k, v in columns.items()},
                )
                for i in range(0, len(rows), BATCH)
            ]
            runs.append(np.concatenate(parts))
            done += 1
            if on_progress is not None:
                on_progress(done / work)
        scores[field] = np.vstack(runs)

    mean_old, mean_new = np.nanmean(scores["old"], axis=0), np.nanmean(scores["new"], axis=0)
    scored = np.isfinite(mean_old) & np.isfinite(mean_new)
    a, b = mean_old[scored], mean_new[scored]
    spearman, kendall = rank_correlations(a, b)
    stability = {f: _stability(scores[f][:, scored], unstable_variance) for f in scorers}
    reasons = []
    if spearman is None:
        reasons.append("no rank correlation: a scorer gives every item the same score (or < 2 items scored)")
    elif spearman < min_spearman:
        reasons.append(f"spearman {spearman:.4f} < {min_spearman}")
    if stability["new"]["unstable_share"] > max_unstable_share:
        reasons.append(
            f"the new scorer is unstable on {stability['new']['unstable_share']:.2%} of the items "
            f"(variance > {unstable_variance} across {repeats} calls)"
        )
    return {
        "verdict": "fail" if reasons else "pass",
        "reasons": reasons,
        "old": scorers["old"].describe(),
        "new": scorers["new"].describe(),
        "data": str(data),
        "rows_in_file": total_rows,
        "items": len(rows),
        "items_scored": int(scored.sum()),
        "repeats": repeats,
        "seed": seed,
        "spearman": spearman,
        "kendall": kendall,
        "top_k": min(top_k, int(scored.sum())),
        "top_k_overlap": top_k_overlap(a, b, top_k),
        "mean_score": {"old": _finite(a.mean()) if len(a) else None, "new": _finite(b.mean()) if len(b) else None},
        "stability": stability,
        "thresholds": {
            "min_spearman": min_spearman,
            "max_unstable_share": max_unstable_share,
            "unstable_variance": unstable_variance,
        },
    }


# ---------------------------------------------------------------------------------------------- approval


def reward_set_key(described: list[dict]) -> str:
    """A reward set's identity: its rewards (name, normalised weight, every parameter), order-free."""
    items = sorted(
        json.dumps({"name": d["name"], "weight": round(float(d["weight"]), 6), "params": d["params"]}, sort_keys=True)
        for d in described
    )
    return json.dumps(items)


def approval_problem(report: Any, rewards: list[dict], *, min_spearman: float) -> str | None:
    """Why a shadow `report` does not approve the reward set `rewards` ([{name, weight, params}], as in a job
    config), or None when it does: verdict pass, Spearman >= min_spearman, and `new` is exactly this set."""
    if not isinstance(report, dict) or "verdict" not in report or "new" not in report:
        return "not a reward shadow report (no verdict / new scorer)"
    if report["verdict"] != "pass":
        return f"its verdict is {report['verdict']} ({'; '.join(report.get('reasons') or [])})"
    spearman = report.get("spearman")
    if spearman is None or spearman < min_spearman:
        return f"its spearman {spearman} is below the profile's {min_spearman}"
    mine = reward_set_key(Scorer(rewards, "rewards").describe())
    try:
        theirs = reward_set_key(report["new"])
    except (KeyError, TypeError, ValueError):
        return "its `new` scorer is malformed"
    if mine != theirs:
        return f"its new scorer is another reward set ({_short(report['new'])}, not {_short(rewards)})"
    return None


def _short(rewards: list[dict]) -> str:
    return ", ".join(f"{r.get('name')}×{round(float(r.get('weight', 1.0)), 3)}" for r in rewards)

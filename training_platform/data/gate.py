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

To add a check: one function `def check_x(ctx: GateContext, params: XParams) -> Outcome` decorated with
`@register_check("x", XParams, "description")`; profiles can then name it. A profile's hash is the sha256 of its
canonical JSON (name + checks with every parameter filled in), so a report names exactly what it was judged by.
"""

from __future__ import annotations

import hashlib
import json
import math
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


def _ge(value: float, limit: float) -> bool:
    return value >= limit - 1e-12


def _le(value: float, limit: float) -> bool:
    return value <= limit + 1e-12


# ---------------------------------------------------------------------------------------------- checks


class SchemaParams(CheckParams):
    max_bad_rows: int = Field(0, ge=0, le=100_000_000, description="Rows failing the format's validation allowed.")


@register_check("schema", SchemaParams, "Rows valid for their format (every row checked, unparseable lines too).")
def check_schema(ctx: GateContext, p: SchemaParams) -> Outcome:
    from training_platform.data.validate import validate_file

    report = ctx.cached("validation", lambda: validate_file(ctx.path, fmt=ctx.fmt or "auto", limits=ctx.limits))
    bad = len(report.bad_rows) + len(report.file_errors)
    examples = [str(e) for e in report.file_errors[:3]] + [str(b.first) for b in report.bad_rows[:5]]
    return Outcome(
        "pass" if bad <= p.max_bad_rows else "fail",
        bad,
        f"<= {p.max_bad_rows}",
        f"{bad} bad row(s) of {report.rows}" + (f": {'; '.join(examples)}" if examples else ""),
        {"format": report.format},
    )


class Distinct2Params(CheckParams):
    min: float = Field(0.6, ge=0, le=1, description="Minimum distinct-2 (unique word bigrams / bigrams).")


@register_check("distinct_2", Distinct2Params, "distinct-2 of the rows' text (the audit report's definition).")
def check_distinct_2(ctx: GateContext, p: Distinct2Params) -> Outcome:
    from training_platform.data.report import _Diversity
    from training_platform.data.text import iter_texts

    def compute():
        diversity = _Diversity((2,))
        for row in ctx.rows():
            for text in iter_texts(row, ctx.fmt):
                diversity.add(text)
        return diversity

    diversity = ctx.cached("diversity2", compute)
    if not diversity.totals[2]:
        return Outcome("skipped", None, f">= {p.min}", "no row has two words: distinct-2 is undefined")
    value = diversity.distinct(2)
    return Outcome(
        "pass" if _ge(value, p.min) else "fail",
        value,
        f">= {p.min}",
        f"{len(diversity.counts[2])} unique of {diversity.totals[2]} word bigrams",
    )


class DivergenceParams(CheckParams):
    n: int = Field(3, ge=1, le=8, description="Words per n-gram.")
    min_kl: float = Field(0.15, ge=0, le=1000, description="Minimum KL(dataset || reference) in bits.")
    smoothing: float = Field(0.01, gt=0, le=10, description="Additive smoothing of the reference's counts.")


def ngram_counts(texts, n: int):
    from training_platform.data.report import _Diversity

    diversity = _Diversity((n,))
    for text in texts:
        diversity.add(text)
    return diversity.counts[n], diversity.totals[n]


def kl_divergence_bits(p_counts, p_total: int, q_counts, q_total: int, smoothing: float) -> float:
    """KL(P || Q) in bits, Q additively smoothed over the union of both supports."""
    vocab = len(set(p_counts) | set(q_counts))
    denom = q_total + smoothing * vocab
    kl = 0.0
    for gram, count in p_counts.items():
        p = count / p_total
        q = (q_counts.get(gram, 0) + smoothing) / denom
        kl += p * math.log2(p / q)
    return max(0.0, kl)


@register_check(
    "ngram_divergence",
    DivergenceParams,
    "KL divergence of the word n-gram distribution from a reference set's (needs a reference).",
)
def check_ngram_divergence(ctx: GateContext, p: DivergenceParams) -> Outcome:
    from training_platform.data.formats import detect_format
    from training_platform.data.io import iter_rows
    from training_platform.data.text import iter_texts

    threshold = f">= {p.min_kl}"
    if ctx.reference is None:
        return Outcome("skipped", None, threshold, "no reference set given")
    counts, total = ngram_counts((t for row in ctx.rows() for t in iter_texts(row, ctx.fmt)), p.n)

    def reference_texts():
        fmt = None
        for row in iter_rows(ctx.reference):
            if fmt is None and isinstance(row, dict):
                fmt = detect_format(row)
            yield from iter_texts(row, fmt)

    ref_counts, ref_total = ngram_counts(reference_texts(), p.n)
    if not total or not ref_total:
        which = "the dataset" if not total else "the reference"
        return Outcome("skipped", None, threshold, f"{which} has no {p.n}-grams")
    value = round(kl_divergence_bits(counts, total, ref_counts, ref_total, p.smoothing), 6)
    return Outcome(
        "pass" if _ge(value, p.min_kl) else "fail",
        value,
        threshold,
        f"KL over {total} dataset and {ref_total} reference {p.n}-grams (bits)",
    )


class DuplicatesParams(CheckParams):
    max_rate: float = Field(0.02, ge=0, le=1, description="Maximum (exact + near duplicate rows) / rows.")
    threshold: float = Field(0.8, gt=0, le=1, description="Jaccard similarity of near duplicates (MinHash).")
    num_perm: int = Field(128, ge=16, le=512)
    ngram: int = Field(5, ge=1, le=32)


@register_check("duplicates", DuplicatesParams, "Exact + near duplicate rate (MinHash LSH, as `tp data dedup`).")
def check_duplicates(ctx: GateContext, p: DuplicatesParams) -> Outcome:
    from training_platform.data.dedup import DedupConfig, find_duplicates

    result = find_duplicates(ctx.texts(), DedupConfig(threshold=p.threshold, num_perm=p.num_perm, ngram=p.ngram))
    if not result.n_rows:
        return Outcome("skipped", None, f"<= {p.max_rate}", "no rows")
    rate = round(result.removed / result.n_rows, 6)
    return Outcome(
        "pass" if _le(rate, p.max_rate) else "fail",
        rate,
        f"<= {p.max_rate}",
        f"{result.exact_duplicates} exact, {result.near_duplicates} near duplicate row(s) of {result.n_rows}",
        {"clusters": [c[:10] for c in result.clusters[:10]]},
    )


class LengthParams(CheckParams):
    min_tokens: int = Field(1, ge=0, le=10_000_000, description="Minimum tokens per text field.")
    max_tokens: int = Field(4096, ge=1, le=10_000_000, description="Maximum tokens per text field.")
    max_outside_share: float = Field(0.01, ge=0, le=1, description="Maximum share of rows with a field outside.")
    fields: list[Annotated[str, StringConstraints(min_length=1, max_length=128)]] | None = Field(
        None, max_length=64, description="Top-level fields to check (default: the format's text fields)."
    )


@register_check(
    "length_bounds",
    LengthParams,
    "Tokens per text field (whitespace words unless a tokenizer is given) inside [min, max].",
)
def check_length_bounds(ctx: GateContext, p: LengthParams) -> Outcome:
    from training_platform.data.text import iter_texts

    threshold = f"share outside [{p.min_tokens}, {p.max_tokens}] <= {p.max_outside_share}"
    if p.min_tokens > p.max_tokens:
        return Outcome("fail", None, threshold, "min_tokens > max_tokens")
    outside, rows, shortest, longest, examples = 0, 0, None, None, []
    batch: list[tuple[int, list[str]]] = []

    def flush():
        nonlocal outside, shortest, longest
        flat = [t for _, texts in batch for t in texts]
        counts = ctx.token_counts(flat) if flat else []
        pos = 0
        for index, texts in batch:
            lengths = counts[pos : pos + len(texts)]
            pos += len(texts)
            if lengths:
                shortest = min(lengths) if shortest is None else min(shortest, min(lengths))
                longest = max(lengths) if longest is None else max(longest, max(lengths))
            if not lengths or any(n < p.min_tokens or n > p.max_tokens for n in lengths):
                outside += 1
                if len(examples) < 10:
                    examples.append(index)
        batch.clear()

    for index, row in enumerate(ctx.rows()):
        rows += 1
        batch.append((index, list(iter_texts(row, ctx.fmt, p.fields))))
        if len(batch) >= 256:
            flush()
    flush()
    if not rows:
        return Outcome("skipped", None, threshold, "no rows")
    share = round(outside / rows, 6)
    return Outcome(
        "pass" if _le(share, p.max_outside_share) else "fail",
        share,
        threshold,
        f"{outside} of {rows} row(s) have a field outside the bounds (or no text); {ctx.token_unit['unit']}"
        f" per field: min {shortest}, max {longest}",
        {"example_rows": examples},
    )


MetaName = Annotated[str, StringConstraints(min_length=1, max_length=128)]
MinDistinct = Annotated[int, Field(ge=1, le=1_000_000)]


class MetadataParams(CheckParams):
    fields: dict[MetaName, MinDistinct] = Field(
        default_factory=lambda: {"role": 4, "style": 3},
        max_length=MAX_METADATA_FIELDS,
        description="Metadata field -> minimum distinct values (a field is read at the row's top level or under "
        "`metadata`).",
    )


def _metadata_value(row: Any, name: str) -> Any:
    if not isinstance(row, dict):
        return None
    if name in row:
        return row[name]
    meta = row.get("metadata")
    return meta.get(name) if isinstance(meta, dict) else None


@register_check(
    "metadata_coverage",
    MetadataParams,
    "Distinct values of declared metadata fields (skipped for fields no row carries).",
)
def check_metadata_coverage(ctx: GateContext, p: MetadataParams) -> Outcome:
    threshold = ", ".join(f"{k} >= {v}" for k, v in p.fields.items()) or "-"
    if not p.fields:
        return Outcome("skipped", None, threshold, "no metadata fields declared")
    seen: dict[str, set[str]] = {name: set() for name in p.fields}
    carried: dict[str, int] = dict.fromkeys(p.fields, 0)
    for row in ctx.rows():
        for name, values in seen.items():
            value = _metadata_value(row, name)
            if value is None:
                continue
            carried[name] += 1
            if len(values) < MAX_DISTINCT_TRACKED:
                values.add(json.dumps(value, sort_keys=True, default=str)[:512])
    value = {name: len(values) for name, values in seen.items() if carried[name]}
    absent = [name for name in p.fields if not carried[name]]
    if not value:
        return Outcome("skipped", None, threshold, f"no row carries {', '.join(absent)}")
    short = [f"{name}: {n} < {p.fields[name]}" for name, n in value.items() if n < p.fields[name]]
    detail = "; ".join(short) if short else "every carried field has enough distinct values"
    if absent:
        detail += f" (skipped, no row carries: {', '.join(absent)})"
    return Outcome("fail" if short else "pass", value, threshold, detail, {"rows_carrying": carried})


class LeakageParams(CheckParams):
    ngram: int = Field(13, ge=1, le=64, description="Words per n-gram of the overlap test.")
    min_tokens: int = Field(8, ge=1, le=1_000_000)
    min_matches: int = Field(1, ge=1, le=1_000_000, description="Overlapping n-grams that make a row leaked.")
    minhash_threshold: float = Field(
        0.85, gt=0, le=1, description="MinHash similarity with an eval row that makes a row leaked."
    )
    num_perm: int = Field(128, ge=16, le=512)
    shingle: int = Field(5, ge=1, le=32, description="Words per MinHash shingle.")
    max_leaked: int = Field(0, ge=0, le=100_000_000, description="Leaked rows allowed.")


def minhash_leaks(ctx: GateContext, p: LeakageParams) -> dict[int, dict[str, Any]]:
    """Training rows whose estimated Jaccard similarity with an eval row is >= the threshold (LSH candidates,
    verified on the signatures): row -> {eval_set, eval_row, similarity}."""
    import numpy as np

    from training_platform.data.dedup import MinHasher, lsh_params
    from training_platform.data.formats import detect_format
    from training_platform.data.io import iter_rows
    from training_platform.data.text import row_text

    hasher = MinHasher(p.num_perm, p.shingle)
    bands, rows_per_band = lsh_params(p.minhash_threshold, p.num_perm)
    buckets: dict[tuple[int, bytes], list[int]] = {}
    owners: list[tuple[str, int]] = []
    signatures: list[np.ndarray] = []

    def add_batch(texts: list[str], refs: list[tuple[str, int]]):
        sigs, counts = hasher.signatures(texts)
        for sig, count, ref in zip(sigs, counts, refs, strict=True):
            if not count:
                continue
            owner = len(owners)
            owners.append(ref)
            signatures.append(sig)
            for b in range(bands):
                buckets.setdefault((b, sig[b * rows_per_band : (b + 1) * rows_per_band].tobytes()), []).append(owner)

    for eval_path in ctx.eval_sets:
        fmt, texts, refs = None, [], []
        for i, row in enumerate(iter_rows(eval_path)):
            if fmt is None and isinstance(row, dict):
                fmt = detect_format(row)
            texts.append(row_text(row, fmt))
            refs.append((eval_path.stem, i))
            if len(texts) >= 512:
                add_batch(texts, refs)
                texts, refs = [], []
        if texts:
            add_batch(texts, refs)
    found: dict[int, dict[str, Any]] = {}
    if not owners:
        return found
    table = np.stack(signatures)

    def check_batch(texts: list[str], start: int):
        sigs, counts = hasher.signatures(texts)
        for j, (sig, count) in enumerate(zip(sigs, counts, strict=True)):
            if not count:
                continue
            candidates = set()
            for b in range(bands):
                candidates.update(buckets.get((b, sig[b * rows_per_band : (b + 1) * rows_per_band].tobytes()), ()))
            if not candidates:
                continue
            ids = np.fromiter(candidates, dtype=np.int64)
            sims = (table[ids] == sig).mean(axis=1)
            best = int(np.argmax(sims))
            if _ge(float(sims[best]), p.minhash_threshold):
                eval_set, eval_row = owners[int(ids[best])]
                found[start + j] = {
                    "eval_set": eval_set,
                    "eval_row": eval_row,
                    "similarity": round(float(sims[best]), 4),
                }

    batch: list[str] = []
    start = 0
    for text in ctx.texts():
        batch.append(text)
        if len(batch) >= 512:
            check_batch(batch, start)
            start += len(batch)
            batch = []
    if batch:
        check_batch(batch, start)
    return found


@register_check(
    "leakage",
    LeakageParams,
    "Rows leaked from the chosen eval sets: n-gram overlap or MinHash similarity (needs eval sets).",
)
def check_leakage(ctx: GateContext, p: LeakageParams) -> Outcome:
    from training_platform.data.contamination import build_index, find_contamination

    threshold = f"leaked rows <= {p.max_leaked} (n-gram overlap, or MinHash similarity >= {p.minhash_threshold})"
    if not ctx.eval_sets:
        return Outcome("skipped", None, threshold, "no eval sets given")
    index = build_index(ctx.eval_sets, n=p.ngram, min_tokens=p.min_tokens)
    by_ngram = {f["row"]: f for f in find_contamination(ctx.rows(), index, fmt=ctx.fmt, min_matches=p.min_matches)}
    by_minhash = minhash_leaks(ctx, p)
    leaked = sorted(set(by_ngram) | set(by_minhash))
    examples = []
    for row in leaked[:10]:
        item: dict[str, Any] = {"row": row}
        if row in by_ngram:
            f = by_ngram[row]
            item["ngram"] = {
                "eval_set": f["eval_set"],
                "eval_row": f["eval_row"],
                "matched_ngrams": f["matched_ngrams"],
                "example": f["example"][:200],
            }
        if row in by_minhash:
            item["minhash"] = by_minhash[row]
        examples.append(item)
    n = len(leaked)
    return Outcome(
        "pass" if n <= p.max_leaked else "fail",
        n,
        threshold,
        f"{len(by_ngram)} row(s) by n-gram overlap, {len(by_minhash)} by MinHash similarity, {n} in all, "
        f"against {', '.join(s.name for s in index.sets)}",
        {"leaked_rows": examples, "eval_sets": [{"name": s.name, "rows": s.rows} for s in index.sets]},
    )


class DifficultyParams(CheckParams):
    min_hard: float | None = Field(None, ge=0, le=1, description="Minimum share of hard rows.")
    max_easy: float | None = Field(None, ge=0, le=1, description="Maximum share of easy rows.")


@register_check(
    "difficulty_mix",
    DifficultyParams,
    "Shares of the audit report's difficulty buckets (easy < 1/3 <= medium < 2/3 <= hard).",
)
def check_difficulty_mix(ctx: GateContext, p: DifficultyParams) -> Outcome:
    import numpy as np

    from training_platform.data.report import (
        BUCKETS,
        DIFFICULTY_FEATURES,
        bucket_of,
        difficulty_features,
        difficulty_scores,
    )

    parts = ([f"hard >= {p.min_hard}"] if p.min_hard is not None else []) + (
        [f"easy <= {p.max_easy}"] if p.max_easy is not None else []
    )
    threshold = ", ".join(parts) or "-"
    if not parts:
        return Outcome("skipped", None, threshold, "no min_hard or max_easy set")
    features: dict[str, list[int]] = {name: [] for name in DIFFICULTY_FEATURES}
    for row in ctx.rows():
        for name, value in difficulty_features(row, ctx.fmt).items():
            features[name].append(value)
    n = len(features[DIFFICULTY_FEATURES[0]])
    if not n:
        return Outcome("skipped", None, threshold, "no rows")
    buckets = bucket_of(difficulty_scores({k: np.asarray(v, dtype=np.float64) for k, v in features.items()}))
    shares = {name: round(float((buckets == i).sum()) / n, 6) for i, name in enumerate(BUCKETS)}
    problems = []
    if p.min_hard is not None and not _ge(shares["hard"], p.min_hard):
        problems.append(f"hard {shares['hard']} < {p.min_hard}")
    if p.max_easy is not None and not _le(shares["easy"], p.max_easy):
        problems.append(f"easy {shares['easy']} > {p.max_easy}")
    return Outcome(
        "fail" if problems else "pass",
        shares,
        threshold,
        "; ".join(problems) or f"easy {shares['easy']}, medium {shares['medium']}, hard {shares['hard']}",
    )


class RewardShadowParams(CheckParams):
    min_spearman: float = Field(
        0.8,
        ge=-1,
        le=1,
        description=("A shadow report approves a reward set when its verdict is pass and its Spearman is >= this."),
    )


REWARD_SHADOW_CHECK = "reward_shadow"


@register_check(
    REWARD_SHADOW_CHECK,
    RewardShadowParams,
    "A training job's reward set must be the `new` scorer of a passing reward shadow report "
    "(checked at the job's preflight; skipped on a dataset).",
)
def check_reward_shadow(ctx: GateContext, p: RewardShadowParams) -> Outcome:
    # About the job's rewards, not the data: training/gate_check.py and the worker's preflight enforce it.
    return Outcome(
        "skipped",
        None,
        f"spearman >= {p.min_spearman}",
        "applies to a training job's rewards: checked at its preflight against passing shadow reports",
    )


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

    eval_sets = [Path(p) for p in (eval_sets or [])]
    if len(eval_sets) > MAX_EVAL_SETS:
        raise GateError([("eval_sets", f"at most {MAX_EVAL_SETS} eval sets")])
    errors = [(f"eval_sets[{i}]", f"no such file: {p}") for i, p in enumerate(eval_sets) if not p.is_file()]
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
            from training_platform.data.convert import load_tokenizer

            tokenizer = load_tokenizer(tokenizer)
        try:
            detected = _detect(path, fmt)
        except Exception:  # noqa: BLE001 - an unparseable first line: the schema check reports it
            detected = fmt
        ctx = GateContext(
            path, fmt=detected, eval_sets=eval_sets, reference=reference, tokenizer=tokenizer, limits=limits
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
        "eval_sets": [{"path": show(p), "sha256": sha256_file(p)} for p in eval_sets],
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

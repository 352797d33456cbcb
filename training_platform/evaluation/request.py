"""What a user asks for when an evaluation is submitted (POST /evaluations, a schedule), turned into an EvalConfig.

    request = EvalRequest.model_validate({"benchmarks": ["gsm8k", {"name": "humaneval", "n_samples": 5}],
                                          "generation": {"max_new_tokens": 128}, "backend": {"batch_size": 16}})
    config = request.to_config(model_path="runs/job-3/checkpoints/step_000040")

`generation` holds defaults for every benchmark; a field a benchmark entry sets itself wins. `backend` holds the
ModelSpec fields except `path` (the model is chosen separately: a registered model, a path, a job's checkpoint).
Errors carry the path of the field the user wrote (`generation.temperature`, `benchmarks.1.n_samples`,
`backend.batch_size`), also when a generation default is what made a benchmark invalid.

`executor` ("auto" | "local" | "ray") and `workers` say where the evaluation runs; they are not part of the
EvalConfig (the service resolves "auto" when the evaluation is submitted: services/evaluations.py,
`resolve_executor`).

Also here: cron expressions (`next_fire_time`) and metric keys such as "gsm8k/accuracy" (`parse_metric_key`).
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from training_platform.core.errors import InvalidInput, pydantic_errors, translate_pydantic_error
from training_platform.evaluation.config import BenchmarkSpec, EvalConfig, ModelSpec, SandboxSpec
from training_platform.evaluation.ray_shards import MAX_WORKERS

__all__ = [
    "OUTBOUND_FIELDS",
    "EvalRequest",
    "GenerationDefaults",
    "RequestError",
    "next_fire_time",
    "parse_cron",
    "parse_metric_key",
    "request_json_schema",
]

# What a request may no longer say: where a keyed call goes, and which variable's value it carries.
OUTBOUND_FIELDS = ("base_url", "api_key_env", "api_key", "url")


class RequestError(InvalidInput):
    """Every problem found, as (field path, reason) pairs."""


class GenerationDefaults(BaseModel):
    """Merged into every BenchmarkSpec, whose bounds check the values (so all problems are listed together)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    max_new_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    n_samples: int | None = None
    k: list[int] | None = Field(None, max_length=32)
    stop: list[str] | None = Field(None, max_length=64)
    chat: bool | None = None
    n_shot: int | None = None
    system_prompt: str | None = None
    limit: int | None = None


class EvalRequest(BaseModel):
    """The evaluation part of POST /evaluations and of a schedule (the model is chosen elsewhere)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    benchmarks: list[str | dict[str, Any]] = Field(
        ...,
        min_length=1,
        max_length=64,
        description='Names or BenchmarkSpec objects, e.g. ["gsm8k", {"name": "humaneval", "n_samples": 5, '
        '"temperature": 0.8, "k": [1, 5]}].',
    )
    generation: GenerationDefaults = Field(
        default_factory=GenerationDefaults, description="Defaults for every benchmark (a benchmark's own field wins)."
    )
    backend: dict[str, Any] = Field(
        default_factory=dict,
        description="ModelSpec fields except `path`: backend, "
        "batch_size, device, dtype, num_threads, ... "
        "With backend 'openai': `endpoint`, the name "
        "of an endpoint the operator defined (GET "
        "/api/v1/endpoints); `model` is then a model "
        "it serves.",
    )
    sandbox: dict[str, Any] = Field(default_factory=dict, description="Code sandbox limits (humaneval).")
    seed: int = Field(0, ge=0, le=2**32 - 1)
    executor: Literal["auto", "local", "ray"] = Field(
        "auto",
        description="Where it runs. local: one eval worker process. ray: each benchmark's items sharded over "
        "`workers` Ray actors on the platform's cluster (TP_RAY_ADDRESS), each loading the model once; the same "
        "scores as local. auto: ray when the platform has a cluster and the benchmarks hold more items than "
        "TP_RAY_MIN_ROWS (default 200000), else local (decided at submission).",
    )
    workers: int | None = Field(
        None,
        ge=1,
        le=MAX_WORKERS,
        description="executor ray: the Ray actors to shard over (default: one per GPU of the cluster, or 2 on a "
        "CPU cluster). The local executor is one worker.",
    )

    def operator_only_errors(self) -> list[tuple[str, str]]:
        """Settings an API user may not choose: running generated code without isolation is the operator's call
        (TP_SANDBOX_ALLOW_UNSAFE=1 on the eval workers), never a request's."""
        if self.sandbox.get("allow_unsandboxed"):
            return [
                (
                    "sandbox.allow_unsandboxed",
                    "only the operator can allow unsandboxed code (TP_SANDBOX_ALLOW_UNSAFE=1 on the eval workers)",
                )
            ]
        return []

    def to_config(self, model_path: str, name: str | None = None) -> EvalConfig:
        """The EvalConfig for `model_path`; RequestError lists every problem with the user's field paths."""
        errors: list[tuple[str, str]] = []
        defaults = self.generation.model_dump(exclude_none=True)
        entries: list[dict[str, Any]] = []
        injected: list[set[str]] = []
        for i, entry in enumerate(self.benchmarks):
            spec = {"name": entry} if isinstance(entry, str) else dict(entry)
            if not isinstance(spec.get("name"), str):
                errors.append((f"benchmarks.{i}.name", "a benchmark needs a name"))
            added = {key for key in defaults if key not in spec}
            spec.update({key: defaults[key] for key in added})
            entries.append(spec)
            injected.append(added)
        if "path" in self.backend:
            errors.append(("backend.path", "the model is chosen by `model` or `job_id`/`checkpoint`, not here"))
        for field in OUTBOUND_FIELDS:
            if field in self.backend:
                errors.append(
                    (
                        f"backend.{field}",
                        "not accepted: the operator defines where requests go; name one "
                        "of their endpoints in `backend.endpoint` (GET /api/v1/endpoints "
                        "lists them) and the model it serves in `model`",
                    )
                )
        if errors:
            raise RequestError(errors)

        from training_platform.evaluation.benchmarks import BENCHMARKS

        for i, spec in enumerate(entries):
            if spec["name"] not in BENCHMARKS:
                errors.append(
                    (
                        f"benchmarks.{i}.name",
                        f"unknown benchmark {spec['name']!r}; known: {', '.join(sorted(BENCHMARKS))}",
                    )
                )
        try:
            model = ModelSpec(path=model_path, **self.backend)
        except ValidationError as exc:
            errors += pydantic_errors(exc, prefix="backend")
            model = None
        specs = []
        from_defaults: dict[tuple[str, str], list[str]] = {}  # one error per default, naming the benchmarks
        for i, spec in enumerate(entries):
            # Each benchmark's own params model; an unknown name (reported above) still has its fields checked.
            known = BENCHMARKS.get(spec["name"]) if isinstance(spec.get("name"), str) else None
            params = known.params if known is not None else BenchmarkSpec
            try:
                specs.append(params(**spec))
            except ValidationError as exc:
                for e in exc.errors():
                    field = str(e["loc"][0]) if e["loc"] else ""
                    msg = translate_pydantic_error(e).reason
                    if field in injected[i]:
                        from_defaults.setdefault((_join("generation", e["loc"]), msg), []).append(spec["name"])
                        continue
                    if not e["loc"]:  # a cross-field rule: blame the generation default if it took part
                        involved = sorted(injected[i] & {"n_samples", "temperature", "k"})
                        loc = f"generation.{involved[0]}" if involved else f"benchmarks.{i}"
                    else:
                        loc = _join(f"benchmarks.{i}", e["loc"])
                    errors.append((loc, msg))
        for (loc, msg), names in from_defaults.items():
            errors.append((loc, f"{msg} (the default for {', '.join(map(repr, names))})"))
        try:
            sandbox = SandboxSpec(**self.sandbox)
        except ValidationError as exc:
            errors += pydantic_errors(exc, prefix="sandbox")
            sandbox = None
        if errors:
            raise RequestError(_unique(errors))
        try:
            return EvalConfig(model=model, benchmarks=specs, seed=self.seed, sandbox=sandbox, name=name)
        except ValidationError as exc:
            raise RequestError(
                [(_join("", e["loc"]) or "benchmarks", translate_pydantic_error(e).reason) for e in exc.errors()]
            ) from None


def request_json_schema(model: type[EvalRequest] = EvalRequest) -> dict[str, Any]:
    """The JSON Schema of `model` (EvalRequest or a route's subclass) for a form generated from it: a `benchmarks`
    item is a registered benchmark's name or its own params object (a union discriminated by `name`, one $def per
    params model, as the training config's `algorithm`), with `max_new_tokens` defaulting to the benchmark's own;
    `generation`'s fields carry BenchmarkSpec's descriptions and bounds (every benchmark checks the value it is
    merged into) and the default all registered benchmarks share, else the defaults per benchmark in the text."""
    from training_platform.evaluation.benchmarks import BENCHMARKS

    schema = model.model_json_schema(ref_template="#/$defs/{model}")
    defs: dict[str, Any] = schema.setdefault("$defs", {})
    mapping: dict[str, str] = {}
    for name, cls in sorted(BENCHMARKS.items()):
        title = cls.params.__name__
        if title not in defs:
            sub = cls.params.model_json_schema(ref_template="#/$defs/{model}")
            defs.update(sub.pop("$defs", {}))
            tokens = sub.get("properties", {}).get("max_new_tokens")
            if tokens is not None and tokens.get("default") is None:
                tokens["default"] = cls.default_max_new_tokens
            defs[title] = sub
        mapping[name] = f"#/$defs/{title}"
    benchmarks = schema["properties"]["benchmarks"]
    benchmarks["items"] = {
        "anyOf": [
            {"type": "string", "enum": sorted(BENCHMARKS), "description": "A benchmark with its defaults."},
            {
                "oneOf": [{"$ref": ref} for ref in dict.fromkeys(mapping.values())],
                "discriminator": {"propertyName": "name", "mapping": mapping},
            },
        ]
    }
    generation = defs.get(GenerationDefaults.__name__, {}).get("properties", {})
    base = BenchmarkSpec.model_json_schema()["properties"]
    for key, prop in generation.items():
        source = base.get(key, {})
        if "description" in source:
            prop["description"] = source["description"]
        inner: dict[str, Any] = next((o for o in source.get("anyOf", [source]) if o.get("type") != "null"), {})
        target = next((o for o in prop.get("anyOf", [prop]) if o.get("type") != "null"), prop)
        for bound in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "items"):
            if bound in inner:
                target[bound] = copy.deepcopy(inner[bound])
        defaults = {name: _benchmark_default(cls, key) for name, cls in BENCHMARKS.items()}
        values = {repr(v) for v in defaults.values()}
        if len(values) == 1 and next(iter(defaults.values())) is not None:
            prop["default"] = next(iter(defaults.values()))
        elif len(values) > 1:
            each = ", ".join(f"{name} {v}" for name, v in sorted(defaults.items()) if v is not None)
            prop["description"] = f"{prop.get('description', '').rstrip('.')}. Default per benchmark: {each}.".lstrip(
                ". "
            )
    return schema


def _benchmark_default(cls: Any, key: str) -> Any:
    """What a benchmark uses for `key` when the request does not set it."""
    field = cls.params.model_fields.get(key)
    value = field.get_default(call_default_factory=True) if field is not None else None
    if key == "max_new_tokens" and value is None:
        return cls.default_max_new_tokens
    return value


def _join(prefix: str, loc: tuple) -> str:
    parts = [prefix] if prefix else []
    return ".".join(parts + [str(p) for p in loc])


def _unique(errors: list[tuple[str, str]]) -> list[tuple[str, str]]:
    seen: set[tuple[str, str]] = set()
    out = []
    for e in errors:
        if e not in seen:
            seen.add(e)
            out.append(e)
    return out


# ---------------------------------------------------------------------------------------------- metric keys


def parse_metric_key(key: str, config: EvalConfig | None = None) -> tuple[str, str]:
    """ "gsm8k/accuracy" -> ("gsm8k", "accuracy"). With `config`, the benchmark must be one it runs and the metric
    one that benchmark reports (ValueError with the choices otherwise)."""
    benchmark, sep, metric = key.partition("/")
    if not sep or not benchmark or not metric:
        raise ValueError(f"expected BENCHMARK/METRIC such as 'gsm8k/accuracy', got {key!r}")
    if config is not None:
        from training_platform.evaluation.benchmarks import get_benchmark

        specs = {b.name: b for b in config.benchmarks}
        if benchmark not in specs:
            raise ValueError(f"benchmark {benchmark!r} is not evaluated here (benchmarks: {', '.join(specs)})")
        names = get_benchmark(specs[benchmark]).metric_names()
        if metric not in names:
            raise ValueError(f"{benchmark} reports {', '.join(names)}; not {metric!r}")
    return benchmark, metric


# ---------------------------------------------------------------------------------------------- cron


def parse_cron(expression: str) -> str:
    """Validate a cron expression: 5 fields (minute hour day-of-month month day-of-week), or 6 with seconds last
    (croniter's convention). Returns it normalised (single spaces); ValueError with the reason otherwise."""
    from croniter import croniter

    normalised = " ".join(str(expression).split())
    fields = normalised.split(" ") if normalised else []
    if len(fields) not in (5, 6):
        raise ValueError(
            f"expected 5 fields (minute hour day month weekday) or 6 (plus seconds), got {len(fields)}: {expression!r}"
        )
    try:
        croniter(normalised, datetime.now(UTC))
    except (ValueError, KeyError) as exc:
        raise ValueError(f"invalid cron expression {expression!r}: {exc}") from None
    return normalised


def next_fire_time(expression: str, after: datetime) -> datetime:
    """The first time strictly after `after` (UTC) that matches the expression."""
    from croniter import croniter

    after = after.replace(tzinfo=UTC) if after.tzinfo is None else after.astimezone(UTC)
    return croniter(expression, after).get_next(datetime)

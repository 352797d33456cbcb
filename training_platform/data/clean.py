"""Run a cleaning recipe over a dataset file.

A recipe is an ordered list of operators with their parameters, in YAML or JSON:

    name: sft-basic                 # optional
    description: ...                # optional
    format: messages                # optional: the rows' format (default: detected from the first row)
    operators:
      - op: fix_unicode
      - op: redact_pii
        kinds: [email, phone]
      - op: length_filter
        unit: words
        min: 3

(a bare list of operators is accepted too). Parameters are validated per operator (unknown keys rejected); errors
name their place, e.g. `operators[2].unit: Input should be 'chars', 'words' or 'tokens'`.

Rows stream through the operators in order; each operator sees the rows kept by the ones before it. The report
gives, per operator, the rows it saw, kept, removed and modified, with sample removed/modified rows.
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from training_platform.core.errors import InvalidInput, pydantic_errors
from training_platform.core.files import write_json
from training_platform.data.formats import DATA_FORMATS, DatasetError, RowError, detect_format
from training_platform.data.io import RowWriter, iter_records, read_json_or_yaml
from training_platform.data.operators import OPERATORS, OpContext, Operator

if TYPE_CHECKING:
    from training_platform.data.executors import Executor


class RecipeError(InvalidInput):
    """A cleaning recipe the rules refuse: (where, why) pairs, one per line."""

    separator = "\n"


@dataclass
class RecipeStep:
    op: str
    params: Any  # the operator's validated Params model

    def to_dict(self) -> dict[str, Any]:
        """Every parameter, defaults included: a report/lineage records exactly what ran."""
        return {"op": self.op, **self.params.model_dump(mode="json")}


@dataclass
class Recipe:
    steps: list[RecipeStep]
    name: str | None = None
    description: str | None = None
    format: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"operators": [s.to_dict() for s in self.steps]}
        for key in ("name", "description", "format"):
            if getattr(self, key) is not None:
                out = {key: getattr(self, key), **out}
        return out


def parse_recipe(data: Any) -> Recipe:
    """Validate a recipe (dict with `operators`, or a bare list). Raises RecipeError listing every problem."""
    errors: list[tuple[str, str]] = []
    meta: dict[str, Any] = {}
    if isinstance(data, list):
        items = data
    elif isinstance(data, dict):
        unknown = sorted(set(data) - {"name", "description", "format", "operators"})
        errors += [(key, "unknown key; a recipe has name, description, format and operators") for key in unknown]
        operators = data.get("operators")
        if not isinstance(operators, list) or not operators:
            errors.append(("operators", "must be a non-empty list of operators"))
            operators = []
        items = operators
        meta = {k: data.get(k) for k in ("name", "description", "format")}
        if meta["format"] is not None and meta["format"] not in DATA_FORMATS:
            errors.append(("format", f"unknown format {meta['format']!r}; use one of {', '.join(DATA_FORMATS)}"))
    else:
        raise RecipeError([("<recipe>", "must be a mapping with `operators` or a list of operators")])
    steps = []
    for i, item in enumerate(items):
        where = f"operators[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("op"), str):
            errors.append((f"{where}.op", "each operator needs `op: <name>`"))
            continue
        name = item["op"]
        if name not in OPERATORS:
            errors.append((f"{where}.op", f"unknown operator {name!r}; use one of {', '.join(sorted(OPERATORS))}"))
            continue
        params = {k: v for k, v in item.items() if k != "op"}
        if isinstance(params.get("params"), dict) and len(params) == 1:  # {op: x, params: {...}} also accepted
            params = params["params"]
        try:
            steps.append(RecipeStep(name, OPERATORS[name].Params.model_validate(params)))
        except ValidationError as exc:
            errors += pydantic_errors(exc, prefix=where, known_fields=OPERATORS[name].Params.model_fields)
    if errors:
        raise RecipeError(errors)
    return Recipe(steps=steps, **meta)


def load_recipe(source: str | Path | dict | list) -> Recipe:
    """From a YAML/JSON file path, or an already parsed dict/list."""
    if isinstance(source, dict | list):
        return parse_recipe(source)
    path = Path(source)
    if not path.is_file():
        raise RecipeError([("<recipe>", f"no such file: {path}")])
    try:
        data = read_json_or_yaml(path)
    except Exception as exc:  # noqa: BLE001 - any yaml/json parser error is the recipe file's, named
        raise RecipeError([("<recipe>", f"cannot parse {path.name}: {exc}")]) from None
    return parse_recipe(data)


# ---------------------------------------------------------------------------------------------- running


def _truncate(value: Any, limit: int = 300) -> Any:
    if isinstance(value, str):
        return value if len(value) <= limit else value[:limit] + f"... [{len(value) - limit} more chars]"
    if isinstance(value, list):
        return [_truncate(v, limit) for v in value[:20]]
    if isinstance(value, dict):
        return {k: _truncate(v, limit) for k, v in value.items()}
    return value


@dataclass
class StepStats:
    index: int
    op: str
    kind: str
    params: dict[str, Any]
    input_rows: int = 0
    kept: int = 0
    removed: int = 0
    modified: int = 0
    reasons: dict[str, int] = field(default_factory=dict)  # removal reason kind -> rows
    samples_removed: list[dict] = field(default_factory=list)
    samples_modified: list[dict] = field(default_factory=list)

    def to_dict(self, counters: dict[str, int]) -> dict[str, Any]:
        out = {
            "index": self.index,
            "op": self.op,
            "kind": self.kind,
            "params": self.params,
            "input_rows": self.input_rows,
            "kept": self.kept,
            "removed": self.removed,
            "modified": self.modified,
            "removed_by_reason": dict(sorted(self.reasons.items(), key=lambda kv: -kv[1])),
            "samples_removed": self.samples_removed,
            "samples_modified": self.samples_modified,
        }
        counts = {k: v for k, v in counters.items() if v}
        if counts:
            out["counts"] = counts
        return out


def _reason_kind(reason: str) -> str:
    for sep in ("=", ":"):
        if sep in reason:
            return reason.split(sep, 1)[0].strip()
    return reason


_OPERATORS: dict[str, list[Operator]] = {}  # this process's operators: one run's at a time


@dataclass
class CleanStage:
    """The recipe over one block of records: the kept rows and the block's per-operator figures. Operators are
    built once per process that runs the stage (a tokenizer is loaded once), their counters per block; each Ray
    task unpickles its own copy of the stage, so they are kept per process by the run's id."""

    recipe: Recipe
    fmt: str | None
    samples: int
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    def operators(self) -> list[Operator]:
        operators = _OPERATORS.get(self.run_id)
        if operators is None:
            _OPERATORS.clear()  # a worker keeps the latest run's operators only
            ctx = OpContext(fmt=self.fmt)
            operators = _OPERATORS[self.run_id] = [OPERATORS[s.op](s.params, ctx) for s in self.recipe.steps]
        return operators

    def __call__(self, records: Any) -> dict[str, Any]:
        operators = self.operators()
        for op in operators:
            op.counters.clear()
        stats = [
            StepStats(i, s.op, op.kind, {}) for i, (s, op) in enumerate(zip(self.recipe.steps, operators, strict=True))
        ]
        kept: list[Any] = []
        for record in records:
            if record.error is not None:
                raise DatasetError([record.error])
            row = record.row
            for op, st in zip(operators, stats, strict=True):
                st.input_rows += 1
                new, reason = op.process(row)
                if new is None:
                    st.removed += 1
                    kind = _reason_kind(reason or "removed")
                    st.reasons[kind] = st.reasons.get(kind, 0) + 1
                    if len(st.samples_removed) < self.samples:
                        st.samples_removed.append(
                            {"index": record.index, "line": record.line, "reason": reason, "row": _truncate(row)}
                        )
                    row = None
                    break
                st.kept += 1
                if new is not row:
                    st.modified += 1
                    if len(st.samples_modified) < self.samples:
                        st.samples_modified.append(
                            {
                                "index": record.index,
                                "line": record.line,
                                "before": _truncate(row),
                                "after": _truncate(new),
                            }
                        )
                    row = new
            if row is not None:
                kept.append(row)
        return {"rows_in": len(records), "kept": kept, "stats": stats, "counters": [op.counters for op in operators]}


def _merge_step(total: StepStats, part: StepStats, samples: int) -> None:
    total.input_rows += part.input_rows
    total.kept += part.kept
    total.removed += part.removed
    total.modified += part.modified
    for kind, n in part.reasons.items():
        total.reasons[kind] = total.reasons.get(kind, 0) + n
    total.samples_removed.extend(part.samples_removed[: samples - len(total.samples_removed)])
    total.samples_modified.extend(part.samples_modified[: samples - len(total.samples_modified)])


def first_format(path: str | Path) -> str | None:
    """The format the first object row shows (None if the file has none before a bad row). A first object row
    whose format cannot be detected is refused, naming its line."""
    for record in iter_records(path):
        if record.error is not None:
            return None
        if isinstance(record.row, dict):
            fmt = detect_format(record.row)
            if fmt is None:
                raise DatasetError(
                    [
                        RowError(
                            record.line,
                            "<row>",
                            f"cannot detect the format from the fields {sorted(record.row)}; set format in the recipe",
                        )
                    ]
                )
            return fmt
    return None


def clean_file(
    path: str | Path,
    output: str | Path,
    recipe: Recipe | str | Path | dict | list,
    *,
    report_path: str | Path | None = None,
    fmt: str | None = None,
    samples: int = 5,
    executor: Executor | None = None,
) -> dict[str, Any]:
    """Stream `path` through the recipe into `output` (atomic), return (and optionally write) the report. The
    recipe runs block by block on `executor` (default: local, in this process); the rows are written here, in the
    input's order."""
    from training_platform.core.files import sha256_file
    from training_platform.data.executors import get_executor
    from training_platform.data.versions import derived_version

    recipe = recipe if isinstance(recipe, Recipe) else load_recipe(recipe)
    fmt = fmt or recipe.format
    if fmt is not None and fmt not in DATA_FORMATS:
        raise ValueError(f"--format: unknown format {fmt!r}; use one of {', '.join(DATA_FORMATS)}")
    executor = executor or get_executor("local")
    fmt = fmt or first_format(path)
    stage = CleanStage(recipe, fmt, samples)
    stats = [StepStats(i, s.op, OPERATORS[s.op].kind, s.to_dict()) for i, s in enumerate(recipe.steps)]
    counters: list[Counter[str]] = [Counter() for _ in recipe.steps]
    rows_in = rows_out = 0
    with RowWriter(output) as writer:
        for part in executor.map_blocks(Path(path), stage):
            rows_in += part["rows_in"]
            for total, step in zip(stats, part["stats"], strict=True):
                _merge_step(total, step, samples)
            for total_count, count in zip(counters, part["counters"], strict=True):
                total_count.update(count)
            for row in part["kept"]:
                writer.write(row)
                rows_out += 1
    input_sha = sha256_file(path)
    report: dict[str, Any] = {
        "input": str(path),
        "output": str(output),
        "format": fmt,
        "input_rows": rows_in,
        "output_rows": rows_out,
        "removed_rows": rows_in - rows_out,
        "recipe": recipe.to_dict(),
        "operators": [st.to_dict(count) for st, count in zip(stats, counters, strict=True)],
        "executor": executor.describe(),
        "input_sha256": input_sha,
        "version": derived_version(
            output, parent_sha256=input_sha, operation="clean", params=recipe.to_dict(), fmt=fmt
        ),
    }
    report["output_sha256"] = report["version"]["sha256"]
    if report_path is not None:
        write_json(report_path, report)
    return report

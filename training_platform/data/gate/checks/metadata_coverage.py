"""Gate check `metadata_coverage`: distinct values of declared metadata fields. The report it goes into:
data/gate/base.py."""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import Field, StringConstraints

from training_platform.data.gate.base import (
    MAX_DISTINCT_TRACKED,
    MAX_METADATA_FIELDS,
    CheckParams,
    GateContext,
    Outcome,
    register_check,
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

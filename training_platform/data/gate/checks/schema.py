"""Gate check `schema`: Rows valid for their format. The report it goes into: data/gate/base.py."""

from __future__ import annotations

from pydantic import Field

from training_platform.data.gate.base import (
    CheckParams,
    GateContext,
    Outcome,
    register_check,
)


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

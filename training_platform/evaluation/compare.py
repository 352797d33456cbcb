"""Compare two evaluation runs sample by sample.

For every benchmark both runs have, samples are paired by (id, sample_index). The comparison reports each run's
metrics, the paired accuracy difference with its standard error (the per-item differences' sample stderr, which
is smaller than the two independent stderrs combined when the runs agree on most items), an exact McNemar
p-value over the discordant pairs, and the flipped items: `fixed` (wrong in A, right in B) and `broken` (right in
A, wrong in B), with both outputs.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from training_platform.evaluation.metrics import mean_stderr
from training_platform.evaluation.report import load_run

__all__ = ["compare_runs", "mcnemar_exact_p", "render_comparison"]


def mcnemar_exact_p(b: int, c: int) -> float:
    """Two-sided exact McNemar test: b, c = discordant pair counts."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def _key(record: dict[str, Any]) -> tuple[str, int]:
    return str(record.get("id")), int(record.get("sample_index", 0))


def _flip(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": a.get("id"),
        "sample_index": a.get("sample_index", 0),
        "reference": a.get("reference"),
        "a": {"extracted": a.get("extracted"), "output": a.get("output")},
        "b": {"extracted": b.get("extracted"), "output": b.get("output")},
    }


def compare_runs(run_a: str | Path, run_b: str | Path) -> dict[str, Any]:
    summary_a, records_a = load_run(run_a)
    summary_b, records_b = load_run(run_b)
    out: dict[str, Any] = {
        "a": {"dir": str(run_a), "model": summary_a.get("model")},
        "b": {"dir": str(run_b), "model": summary_b.get("model")},
        "benchmarks": {},
    }
    common = [n for n in summary_a.get("benchmarks", {}) if n in summary_b.get("benchmarks", {})]
    out["only_in_a"] = sorted(set(summary_a.get("benchmarks", {})) - set(common))
    out["only_in_b"] = sorted(set(summary_b.get("benchmarks", {})) - set(common))
    for name in common:
        bench_a, bench_b = summary_a["benchmarks"][name], summary_b["benchmarks"][name]
        by_a = {_key(r): r for r in records_a.get(name, [])}
        by_b = {_key(r): r for r in records_b.get(name, [])}
        paired = [k for k in by_a if k in by_b]
        fixed, broken, diffs = [], [], []
        both_right = both_wrong = 0
        for key in paired:
            ca, cb = bool(by_a[key].get("correct")), bool(by_b[key].get("correct"))
            diffs.append(float(cb) - float(ca))
            if ca and cb:
                both_right += 1
            elif not ca and not cb:
                both_wrong += 1
            elif cb:
                fixed.append(_flip(by_a[key], by_b[key]))
            else:
                broken.append(_flip(by_a[key], by_b[key]))
        metrics = {}
        for metric in bench_a.get("metrics", {}):
            if metric in bench_b.get("metrics", {}):
                va, vb = bench_a["metrics"][metric]["value"], bench_b["metrics"][metric]["value"]
                metrics[metric] = {"a": va, "b": vb, "delta": vb - va}
        n = len(paired)
        out["benchmarks"][name] = {
            "metrics": metrics,
            "paired": {
                "n": n,
                "accuracy_a": (both_right + len(broken)) / n if n else 0.0,
                "accuracy_b": (both_right + len(fixed)) / n if n else 0.0,
                "delta": sum(diffs) / n if n else 0.0,
                "delta_stderr": mean_stderr(diffs),
                "mcnemar_p": mcnemar_exact_p(len(fixed), len(broken)),
            },
            "counts": {
                "both_correct": both_right,
                "both_wrong": both_wrong,
                "fixed": len(fixed),
                "broken": len(broken),
                "only_in_a": len(by_a) - n,
                "only_in_b": len(by_b) - n,
            },
            "same_data": bench_a.get("data_sha256") == bench_b.get("data_sha256"),
            "fixed": fixed,
            "broken": broken,
        }
    return out


def render_comparison(cmp: dict[str, Any], *, max_items: int = 20) -> str:
    lines = [f"A: {cmp['a']['dir']}", f"B: {cmp['b']['dir']}"]
    for name, bench in cmp["benchmarks"].items():
        p, c = bench["paired"], bench["counts"]
        lines += ["", f"== {name} ==" + ("" if bench["same_data"] else "  (WARNING: different data files)")]
        for metric, m in bench["metrics"].items():
            lines.append(f"  {metric:<20} A {m['a']:.4f}  B {m['b']:.4f}  delta {m['delta']:+.4f}")
        lines.append(
            f"  paired on {p['n']} samples: delta {p['delta']:+.4f} ± {p['delta_stderr']:.4f} (stderr), "
            f"McNemar p={p['mcnemar_p']:.3g}"
        )
        lines.append(
            f"  fixed (A wrong -> B right): {c['fixed']}   broken (A right -> B wrong): {c['broken']}   "
            f"both right: {c['both_correct']}   both wrong: {c['both_wrong']}"
        )
        for label, flips in (("fixed", bench["fixed"]), ("broken", bench["broken"])):
            for flip in flips[:max_items]:
                lines.append(
                    f"    {label}: {flip['id']} #{flip['sample_index']}: A={flip['a']['extracted']!r} "
                    f"B={flip['b']['extracted']!r} ref={str(flip['reference'])[:40]!r}"
                )
            if len(flips) > max_items:
                lines.append(f"    ... {len(flips) - max_items} more {label}")
    for side in ("a", "b"):
        if cmp[f"only_in_{side}"]:
            lines.append(f"only in {side.upper()}: {', '.join(cmp[f'only_in_{side}'])}")
    return "\n".join(lines)

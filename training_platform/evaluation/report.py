"""Reports of an evaluation run: `report.md` and a static, self-contained `report.html` with per-sample drill-down.

`load_run(dir)` -> (summary, {benchmark: records}); `render_markdown` / `render_html` build the pages;
`write_reports(dir)` writes both next to `summary.json`.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from training_platform.core.files import read_jsonl

# The layout of an evaluation run directory (runner.py writes it, this module and compare.py read it).
SUMMARY_FILE = "summary.json"
SAMPLES_DIR = "samples"

__all__ = ["format_metric", "load_run", "render_html", "render_markdown", "write_reports"]


def load_run(run_dir: str | Path) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    run_dir = Path(run_dir).expanduser()
    summary_path = run_dir / SUMMARY_FILE
    if not summary_path.is_file():
        raise FileNotFoundError(f"{run_dir} is not an evaluation run (no {SUMMARY_FILE})")
    summary = json.loads(summary_path.read_text(encoding="utf-8"))
    records: dict[str, list[dict[str, Any]]] = {}
    for name in summary.get("benchmarks", {}):
        path = run_dir / SAMPLES_DIR / f"{name}.jsonl"
        records[name] = read_jsonl(path) if path.is_file() else []
    return summary, records


def format_metric(metric: dict[str, Any]) -> str:
    lo, hi = metric.get("ci95", [0.0, 0.0])
    return f"{metric['value']:.4f} ± {metric['stderr']:.4f} (95% CI {lo:.3f}-{hi:.3f}, n={metric['n']})"


def _model_label(summary: dict[str, Any]) -> str:
    model = summary.get("model", {})
    return str(model.get("model") or summary.get("config", {}).get("model", {}).get("path", "?"))


def _short(text: Any, limit: int = 80) -> str:
    text = "" if text is None else str(text)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render_markdown(summary: dict[str, Any], records: dict[str, list[dict[str, Any]]], *, max_samples: int = 50) -> str:
    lines = [
        f"# Evaluation: {summary.get('name') or _model_label(summary)}",
        "",
        f"- model: `{_model_label(summary)}` ({summary.get('model', {}).get('backend', '?')})",
        f"- started: {summary.get('started_at', '?')}, finished: {summary.get('finished_at', '-')}, "
        f"status: {summary.get('status', '?')}",
        "",
    ]
    lines += ["| benchmark | metric | value | stderr | 95% CI | n |", "|---|---|---|---|---|---|"]
    for name, bench in summary.get("benchmarks", {}).items():
        for metric_name, m in bench.get("metrics", {}).items():
            lo, hi = m.get("ci95", [0, 0])
            lines.append(
                f"| {name} | {metric_name} | {m['value']:.4f} | {m['stderr']:.4f} | {lo:.3f}-{hi:.3f} | {m['n']} |"
            )
    for name, bench in summary.get("benchmarks", {}).items():
        rows = records.get(name, [])
        lines += [
            "",
            f"## {name}",
            "",
            f"{bench.get('n_items', len(rows))} items, {bench.get('n_samples', 1)} sample(s) each, "
            f"{'chat' if bench.get('chat') else 'completion'} prompts, {bench.get('n_shot', 0)}-shot; "
            f"data `{bench.get('data', '?')}`; time {bench.get('time_s', {})}",
            "",
        ]
        lines += ["| id | # | correct | extracted | reference | output |", "|---|---|---|---|---|---|"]
        for r in rows[:max_samples]:
            mark = "✅" if r.get("correct") else "❌"
            reference = r.get(_reference_field(r.get("benchmark")))
            cells = [
                str(r.get("id")),
                str(r.get("sample_index", 0)),
                mark,
                _short(r.get("extracted"), 40),
                _short(reference, 40),
                _short(r.get("output"), 80),
            ]
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        if len(rows) > max_samples:
            lines.append(f"\n… {len(rows) - max_samples} more in `samples/{name}.jsonl`")
    return "\n".join(lines) + "\n"


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}
details{border:1px solid #ddd;margin:4px 0;padding:4px 8px;border-radius:4px}
summary{cursor:pointer}.ok{color:#17803d}.bad{color:#b42318}
pre{white-space:pre-wrap;background:#f6f8fa;padding:8px;border-radius:4px;max-height:30em;overflow:auto}
"""


def render_html(summary: dict[str, Any], records: dict[str, list[dict[str, Any]]], *, max_samples: int = 2000) -> str:
    e = html.escape
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>Evaluation: {e(summary.get('name') or _model_label(summary))}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>Evaluation: {e(summary.get('name') or _model_label(summary))}</h1>",
        f"<p>model <code>{e(_model_label(summary))}</code> ({e(str(summary.get('model', {}).get('backend')))})"
        f", started {e(str(summary.get('started_at')))}, status {e(str(summary.get('status')))}</p>",
        "<table><tr><th>benchmark</th><th>metric</th><th>value</th><th>stderr</th><th>95% CI</th><th>n</th></tr>",
    ]
    for name, bench in summary.get("benchmarks", {}).items():
        for metric_name, m in bench.get("metrics", {}).items():
            lo, hi = m.get("ci95", [0, 0])
            parts.append(
                f"<tr><td>{e(name)}</td><td>{e(metric_name)}</td><td>{m['value']:.4f}</td>"
                f"<td>{m['stderr']:.4f}</td><td>{lo:.3f}–{hi:.3f}</td><td>{m['n']}</td></tr>"
            )
    parts.append("</table>")
    skip = {"benchmark", "id", "sample_index", "prompt", "output", "extracted", "reference", "correct"}
    for name, rows in records.items():
        bench = summary["benchmarks"].get(name, {})
        parts.append(
            f"<h2>{e(name)}</h2><p>{len(rows)} samples; data <code>{e(str(bench.get('data')))}</code>; "
            f"{'chat' if bench.get('chat') else 'completion'} prompts</p>"
        )
        for r in rows[:max_samples]:
            ok = bool(r.get("correct"))
            label = (
                f"<span class='{'ok' if ok else 'bad'}'>{'✔' if ok else '✘'}</span> {e(str(r.get('id')))}"
                f" #{r.get('sample_index', 0)} — extracted <code>{e(_short(r.get('extracted'), 60))}</code>"
                f", reference <code>{e(_short(r.get('reference'), 60))}</code>"
            )
            extra = {k: v for k, v in r.items() if k not in skip}
            parts.append(
                f"<details><summary>{label}</summary>"
                f"<h4>prompt</h4><pre>{e(str(r.get('prompt', '')))}</pre>"
                f"<h4>output</h4><pre>{e(str(r.get('output', '')))}</pre>"
                f"<h4>extracted</h4><pre>{e(str(r.get('extracted')))}</pre>"
                f"<h4>reference</h4><pre>{e(str(r.get('reference')))}</pre>"
                f"<h4>details</h4><pre>{e(json.dumps(extra, indent=1, ensure_ascii=False))}</pre></details>"
            )
        if len(rows) > max_samples:
            parts.append(f"<p>… {len(rows) - max_samples} more in samples/{e(name)}.jsonl</p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_reports(run_dir: str | Path) -> dict[str, Path]:
    run_dir = Path(run_dir)
    summary, records = load_run(run_dir)
    paths = {"md": run_dir / "report.md", "html": run_dir / "report.html"}
    paths["md"].write_text(render_markdown(summary, records), encoding="utf-8")
    paths["html"].write_text(render_html(summary, records), encoding="utf-8")
    return paths


def _reference_field(benchmark: Any) -> str:
    """The record field a benchmark's report shows as the reference (`Benchmark.report_reference`)."""
    from training_platform.evaluation.benchmarks import BENCHMARKS

    cls = BENCHMARKS.get(benchmark) if isinstance(benchmark, str) else None
    return cls.report_reference if cls is not None else "reference"

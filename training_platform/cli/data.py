"""`tp data validate|convert|clean|dedup|score|report|decontaminate|resample|gate`: the data factory on local files.

Wired into `tp` by `register(app)`. Exit codes: 0 ok, 2 bad input (bad rows as `line N: field: reason`, or a
message naming the bad argument), 1 unexpected failure.

`validate` prints the detected format alone on the first stdout line, then one `line N: <field>: <reason>` line per
bad row (its first problem) on stdout; the summary goes to stderr. The other commands print a short summary on stdout
and their errors on stderr; reports are JSON files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal, cast

import typer

from training_platform.cli.common import err as _err
from training_platform.cli.common import guard

data_app = typer.Typer(help="Dataset utilities.", no_args_is_help=True)
synth_app = typer.Typer(help="Generate synthetic datasets.", no_args_is_help=True)
data_app.add_typer(synth_app, name="synth")


def register(app: typer.Typer) -> None:
    app.add_typer(data_app, name="data")


def _data_errors(exc: BaseException) -> int | None:
    """Bad rows as `line N: field: reason`; a recipe's problems prefixed with `recipe:`."""
    from training_platform.data.clean import RecipeError
    from training_platform.data.formats import DatasetError

    if isinstance(exc, DatasetError):
        for error in exc.rows:
            _err(str(error))
        if exc.total_bad > len({e.line for e in exc.rows}):
            _err(f"{exc.total_bad} bad rows in all")
        return 2
    if isinstance(exc, RecipeError):
        for problem in exc.errors:
            _err(f"recipe: {problem}")
        return 2
    return None


def _guard():
    return guard(_data_errors)


def _need_file(path: Path, option: str = "input") -> None:
    if not path.is_file():
        raise FileNotFoundError(f"{option}: no such file: {path}")


def _executor(name: str, ray_address: str | None):
    """`--executor local|ray` (ray: the cluster of --ray-address, else TP_RAY_ADDRESS)."""
    from training_platform.data.executors import get_executor

    if name not in ("local", "ray"):
        raise ValueError(f"--executor: must be local or ray, got {name!r}")
    if name == "local" and ray_address:
        raise ValueError("--ray-address: applies to --executor ray")
    return get_executor(name, address=ray_address)


EXECUTOR_HELP = "local (this process) | ray: Ray Data on the cluster of --ray-address, else TP_RAY_ADDRESS."


def _parse_fields(fields: list[str]) -> list[str] | None:
    out = [f.strip() for item in fields for f in item.split(",") if f.strip()]
    return out or None


def _data_commands(data_app: typer.Typer) -> None:
    """The data factory commands of `tp data`."""

    @data_app.command("validate")
    def validate_cmd(
        file: Path = typer.Argument(..., help="JSONL/JSON/Parquet/CSV dataset."),
        fmt: str = typer.Option("auto", "--format", help="Row format (default: detected from the first row)."),
        output: Path | None = typer.Option(None, "--output", help="Also store the rows here (see --policy)."),
        policy: str = typer.Option(
            "reject",
            "--policy",
            help="With --output: reject (any bad row -> nothing stored) or quarantine (bad rows to their own file).",
        ),
        quarantine: Path | None = typer.Option(
            None, "--quarantine", help="Quarantine file (default <output stem>.quarantine.jsonl)."
        ),
        report: Path | None = typer.Option(None, "--report", help="Write the full report (every problem) as JSON."),
        executor: str = typer.Option("local", "--executor", help=EXECUTOR_HELP),
        ray_address: str | None = typer.Option(None, "--ray-address", help="The Ray cluster (host:port)."),
    ):
        """Print the detected format, then `line N: field: reason` per bad row. Exit 0 if every row is valid,
        else 2."""
        from training_platform.core.files import write_json
        from training_platform.data.formats import DatasetError
        from training_platform.data.validate import Policy, ingest_file, validate_file

        with _guard():
            runner = _executor(executor, ray_address)
            try:
                if output is not None:  # cast: ingest_file rejects a policy other than reject / quarantine
                    result = ingest_file(
                        file, output, policy=cast(Policy, policy), fmt=fmt, quarantine=quarantine, executor=runner
                    )
                else:
                    result = validate_file(file, fmt=fmt, executor=runner)
            except DatasetError as exc:  # file-level problems (missing file, unsupported type): same line format
                for error in exc.rows:
                    typer.echo(str(error))
                raise typer.Exit(2) from None
            if result.format is not None:
                typer.echo(result.format)
            for line in result.lines():
                typer.echo(line)
            if report is not None:
                write_json(report, result.to_dict(max_rows=None))
            if result.ok:
                _err(f"OK: {result.rows} rows, all valid")
            else:
                _err(f"{len(result.bad_rows)} bad row(s) of {result.rows}")
            if output is not None:
                if result.accepted:
                    _err(
                        f"stored {result.valid_rows} rows: {output}"
                        + (f"; quarantined {len(result.bad_rows)}: {result.quarantine}" if result.quarantine else "")
                    )
                else:
                    _err(f"rejected: nothing stored ({policy})")
            if not result.ok:
                raise typer.Exit(2)

    @data_app.command("convert")
    def convert_cmd(
        file: Path = typer.Argument(..., help="Input dataset."),
        to: str = typer.Option(
            ...,
            "--to",
            help="Target: messages, sharegpt, alpaca, prompt_completion, "
            "preference_plain, preference_conversational, rl_prompt, verl.",
        ),
        output: Path = typer.Option(..., "--output", help="Output file (.jsonl/.json/.parquet/.csv)."),
        fmt: str = typer.Option("auto", "--format", help="Input format (default: detected)."),
        data_source: str = typer.Option("custom", "--data-source", help="verl data_source for rows without one."),
        ability: str | None = typer.Option(None, "--ability", help="verl ability for rows without one."),
        preview_tokenizer: Path | None = typer.Option(
            None, "--preview-tokenizer", help="Print the first rows rendered with this tokenizer's chat template."
        ),
        preview: int = typer.Option(3, "--preview", min=1, help="How many rows to preview."),
        executor: str = typer.Option("local", "--executor", help=EXECUTOR_HELP),
        ray_address: str | None = typer.Option(None, "--ray-address", help="The Ray cluster (host:port)."),
    ):
        """Convert between compatible formats (every row must convert, or nothing is written)."""
        from training_platform.data.convert import convert_file, preview_chat_template

        with _guard():
            _need_file(file)
            runner = _executor(executor, ray_address)
            result = convert_file(file, output, to, fmt=fmt, data_source=data_source, ability=ability, executor=runner)
            typer.echo(f"converted {result.converted} rows: {result.source_format} -> {result.target_format}: {output}")
            if preview_tokenizer is not None:
                for item in preview_chat_template(output, preview_tokenizer, n=preview):
                    typer.echo(f"--- row {item['index']} ({item['tokens']} tokens)")
                    typer.echo(item["text"])

    @data_app.command("clean")
    def clean_cmd(
        file: Path = typer.Argument(..., help="Input dataset."),
        recipe: Path = typer.Option(..., "--recipe", help="Recipe YAML/JSON: ordered operators with params."),
        output: Path = typer.Option(..., "--output", help="Cleaned dataset."),
        report: Path = typer.Option(..., "--report", help="Report JSON (kept/removed per operator, samples)."),
        fmt: str | None = typer.Option(None, "--format", help="Row format (default: recipe's, else detected)."),
        samples: int = typer.Option(5, "--samples", min=0, help="Sample rows per operator in the report."),
        executor: str = typer.Option("local", "--executor", help=EXECUTOR_HELP),
        ray_address: str | None = typer.Option(None, "--ray-address", help="The Ray cluster (host:port)."),
    ):
        """Run a cleaning recipe."""
        from training_platform.data.clean import clean_file, load_recipe

        with _guard():
            _need_file(file)
            loaded = load_recipe(recipe)
            runner = _executor(executor, ray_address)
            result = clean_file(file, output, loaded, report_path=report, fmt=fmt, samples=samples, executor=runner)
            for op in result["operators"]:
                extra = f", modified {op['modified']}" if op["kind"] == "mapper" else ""
                typer.echo(f"{op['index']:>2} {op['op']:24s} kept {op['kept']}, removed {op['removed']}{extra}")
            typer.echo(f"kept {result['output_rows']} of {result['input_rows']} rows: {output}")

    @data_app.command("dedup")
    def dedup_cmd(
        file: Path = typer.Argument(..., help="Input dataset."),
        output: Path = typer.Option(..., "--output", help="Deduplicated dataset."),
        report: Path = typer.Option(..., "--report", help="Report JSON (counts and clusters)."),
        threshold: float = typer.Option(0.8, "--threshold", help="Jaccard similarity of near duplicates."),
        num_perm: int = typer.Option(128, "--num-perm", help="MinHash permutations."),
        ngram: int = typer.Option(5, "--ngram", help="Words per shingle."),
        bands: int | None = typer.Option(None, "--bands", help="LSH bands (with --rows; default from threshold)."),
        rows: int | None = typer.Option(None, "--rows", help="LSH rows per band."),
        margin: float | None = typer.Option(
            None, "--margin", help="Accept estimated Jaccard >= threshold - margin (default: 3 std of the estimator)."
        ),
        keep: str = typer.Option(
            "first", "--keep", help="Which row of a cluster to keep: first or best (heuristic quality)."
        ),
        field: list[str] = typer.Option([], "--field", help="Text fields to compare (default: the format's)."),
        fmt: str | None = typer.Option(None, "--format", help="Row format (default: detected)."),
        exact: bool = typer.Option(True, "--exact/--no-exact", help="Exact (normalised text) duplicates."),
        near: bool = typer.Option(True, "--near/--no-near", help="Near duplicates (MinHash LSH)."),
        executor: str = typer.Option("local", "--executor", help=EXECUTOR_HELP),
        ray_address: str | None = typer.Option(None, "--ray-address", help="The Ray cluster (host:port)."),
    ):
        """Remove exact and near duplicates; the report lists the duplicate clusters (0-based row indices)."""
        from training_platform.data.dedup import DedupConfig, dedup_file

        with _guard():
            _need_file(file)
            config = DedupConfig(
                threshold=threshold,
                num_perm=num_perm,
                ngram=ngram,
                bands=bands,
                rows=rows,
                margin=margin,
                keep=cast(Literal["first", "best"], keep),  # DedupConfig rejects any other value
                exact=exact,
                near=near,
            )
            runner = _executor(executor, ray_address)
            result = dedup_file(
                file, output, config, report_path=report, fmt=fmt, fields=_parse_fields(field), executor=runner
            )
            typer.echo(
                f"kept {result['output_rows']} of {result['input_rows']} rows "
                f"({result['exact_duplicates']} exact, {result['near_duplicates']} near duplicates, "
                f"{len(result['clusters'])} clusters): {output}"
            )

    @data_app.command("score")
    def score_cmd(
        file: Path = typer.Argument(..., help="Input dataset."),
        output: Path = typer.Option(..., "--output", help="Rows with their scores under `_scores`."),
        report: Path | None = typer.Option(None, "--report", help="Report JSON (score distributions, judge counters)."),
        heuristics: bool = typer.Option(True, "--heuristics/--no-heuristics", help="Heuristic scores."),
        perplexity_model: Path | None = typer.Option(None, "--perplexity-model", help="Local causal LM directory."),
        max_length: int = typer.Option(512, "--max-length", min=8, help="Tokens per row for perplexity."),
        judge: Path | None = typer.Option(
            None,
            "--judge",
            help="Judge/reward config YAML/JSON: `endpoint` (a name "
            "from TP_ENDPOINTS / TP_ENDPOINTS_FILE), `model`, "
            "`mode`, ... (docs/endpoints.md).",
        ),
        field: list[str] = typer.Option([], "--field", help="Text fields to score (default: the format's)."),
        by: str | None = typer.Option(None, "--by", help="Filter on this score (e.g. quality, perplexity, judge)."),
        min_value: float | None = typer.Option(None, "--min", help="Keep rows with score >= this."),
        max_value: float | None = typer.Option(None, "--max", help="Keep rows with score <= this."),
        top_k: int | None = typer.Option(None, "--top-k", help="Keep the k best rows."),
        lowest: bool = typer.Option(False, "--lowest", help="Best = lowest (e.g. perplexity)."),
        executor: str = typer.Option("local", "--executor", help=EXECUTOR_HELP + " The judge runs here."),
        ray_address: str | None = typer.Option(None, "--ray-address", help="The Ray cluster (host:port)."),
    ):
        """Score rows (heuristics, perplexity, judge); optionally keep rows by threshold or top-k."""
        from training_platform.data.score import score_file, score_then_filter

        with _guard():
            _need_file(file)
            kwargs: dict[str, Any] = {
                "heuristics": heuristics,
                "perplexity_model": perplexity_model,
                "perplexity_max_length": max_length,
                "judge": judge,
                "fields": _parse_fields(field),
            }
            if by is None and (min_value is not None or max_value is not None or top_k is not None):
                raise ValueError("--by: name the score to filter on (e.g. --by quality)")
            kwargs["executor"] = _executor(executor, ray_address)
            if by is not None:
                result = score_then_filter(
                    file,
                    output,
                    by=by,
                    min_value=min_value,
                    max_value=max_value,
                    top_k=top_k,
                    lowest=lowest,
                    report_path=report,
                    **kwargs,
                )
                typer.echo(f"scored {result['rows']} rows, kept {result['filter']['output_rows']} by {by}: {output}")
            else:
                result = score_file(file, output, report_path=report, **kwargs)
                typer.echo(f"scored {result['rows']} rows: {output}")
            if "judge" in result:
                j = result["judge"]
                typer.echo(
                    f"judge: {j['requests']} requests, {j['cache_hits']} cache hits, {j['errors']} errors, "
                    f"mean latency {j['latency_mean_s']}s"
                )

    @data_app.command("report")
    def report_cmd(
        file: Path = typer.Argument(..., help="Input dataset."),
        output: Path = typer.Option(..., "--output", help="Report JSON."),
        eval_set: list[Path] = typer.Option([], "--eval-set", help="Eval set to check for contamination (repeatable)."),
        ngram: int = typer.Option(13, "--ngram", help="Contamination n-gram size (words)."),
        min_matches: int = typer.Option(1, "--min-matches", min=1, help="Overlapping n-grams to flag a row."),
        tokenizer: Path | None = typer.Option(None, "--tokenizer", help="Tokenizer directory for token lengths."),
        dedup: bool = typer.Option(True, "--dedup/--no-dedup", help="Include the duplicate rate."),
        field: list[str] = typer.Option([], "--field", help="Text fields (default: the format's)."),
        fmt: str | None = typer.Option(None, "--format", help="Row format (default: detected)."),
        executor: str = typer.Option("local", "--executor", help=EXECUTOR_HELP),
        ray_address: str | None = typer.Option(None, "--ray-address", help="The Ray cluster (host:port)."),
    ):
        """Audit: length/turn distributions, distinct-1/2, difficulty buckets, duplicates, contamination."""
        from training_platform.data.report import audit_file

        with _guard():
            _need_file(file)
            for path in eval_set:
                _need_file(path, "--eval-set")
            runner = _executor(executor, ray_address)
            result = audit_file(
                file,
                eval_sets=list(eval_set),
                tokenizer=tokenizer,
                fmt=fmt,
                fields=_parse_fields(field),
                ngram=ngram,
                min_matches=min_matches,
                dedup=dedup,
                report_path=output,
                executor=runner,
            )
            line = (
                f"{result['rows']} rows, distinct-1 {result['distinct_1']}, distinct-2 {result['distinct_2']}, "
                f"difficulty {json.dumps(result['difficulty_buckets'])}"
            )
            if "contaminated_rows" in result:
                line += f", {len(result['contaminated_rows'])} contaminated"
            typer.echo(f"{line}: {output}")

    @data_app.command("decontaminate")
    def decontaminate_cmd(
        file: Path = typer.Argument(..., help="Input dataset."),
        eval_set: list[Path] = typer.Option(..., "--eval-set", help="Eval set (repeatable)."),
        output: Path = typer.Option(..., "--output", help="Rows without eval overlap."),
        report: Path | None = typer.Option(None, "--report", help="Report JSON (removed rows)."),
        ngram: int = typer.Option(13, "--ngram", help="N-gram size (words)."),
        min_matches: int = typer.Option(1, "--min-matches", min=1),
        executor: str = typer.Option("local", "--executor", help=EXECUTOR_HELP),
        ray_address: str | None = typer.Option(None, "--ray-address", help="The Ray cluster (host:port)."),
    ):
        """Remove rows that overlap registered eval sets."""
        from training_platform.data.contamination import decontaminate_file

        with _guard():
            _need_file(file)
            for path in eval_set:
                _need_file(path, "--eval-set")
            runner = _executor(executor, ray_address)
            result = decontaminate_file(
                file, output, list(eval_set), n=ngram, min_matches=min_matches, report_path=report, executor=runner
            )
            typer.echo(f"removed {result['removed_rows']} contaminated rows, kept {result['output_rows']}: {output}")

    @data_app.command("resample")
    def resample_cmd(
        file: Path = typer.Argument(..., help="Input dataset."),
        mix: str = typer.Option(..., "--mix", help="Target difficulty mix, e.g. easy=0.2,medium=0.5,hard=0.3."),
        output: Path = typer.Option(..., "--output", help="Resampled dataset."),
        total: int | None = typer.Option(None, "--total", min=1, help="Rows to draw (default: the most possible)."),
        replace: bool = typer.Option(False, "--replace", help="Sample with replacement."),
        seed: int = typer.Option(0, "--seed"),
        report: Path | None = typer.Option(None, "--report"),
    ):
        """Resample rows to a target easy/medium/hard mix."""
        from training_platform.data.report import resample_to_mix

        with _guard():
            _need_file(file)
            try:
                weights = {k.strip(): float(v) for k, v in (part.split("=", 1) for part in mix.split(","))}
            except ValueError:
                raise ValueError(f"--mix: expected easy=W,medium=W,hard=W, got {mix!r}") from None
            result = resample_to_mix(file, output, weights, total=total, replace=replace, seed=seed, report_path=report)
            typer.echo(f"drew {result['output_rows']} rows {json.dumps(result['output_buckets'])}: {output}")

    @data_app.command("gate")
    def gate_cmd(
        file: Path = typer.Argument(..., help="Dataset file."),
        profile: str = typer.Option(
            "default", "--profile", help="Gate profile: default, strict, or one of $TP_GATE_PROFILES_FILE."
        ),
        eval_set: list[Path] = typer.Option([], "--eval-set", help="Eval set for the leakage check (repeatable)."),
        reference: Path | None = typer.Option(
            None, "--reference", help="Reference set for the n-gram divergence check."
        ),
        tokenizer: Path | None = typer.Option(
            None, "--tokenizer", help="Tokenizer directory for the length bounds (default: whitespace words)."
        ),
        fmt: str | None = typer.Option(None, "--format", help="Row format (default: detected)."),
        report: Path | None = typer.Option(None, "--report", help="Write the gate report (JSON) here."),
        profiles_file: Path | None = typer.Option(
            None, "--profiles-file", help="Profiles YAML (default: $TP_GATE_PROFILES_FILE)."
        ),
    ):
        """Run a quality gate: one line per check (PASS / FAIL / SKIP, value, threshold). Exit 0 when every check
        passes (skipped ones say why), 1 when a check fails, 2 on bad input."""
        from training_platform.core.files import write_json
        from training_platform.data.gate import GateError, resolve_local_profile, run_gate, summary_line

        with _guard():
            try:
                _need_file(file)
                for path in eval_set:
                    _need_file(path, "--eval-set")
                if reference is not None:
                    _need_file(reference, "--reference")
                loaded = resolve_local_profile(profile, str(profiles_file) if profiles_file else None)
                result = run_gate(
                    file, loaded, eval_sets=list(eval_set), reference=reference, tokenizer=tokenizer, fmt=fmt
                )
            except GateError as exc:
                for loc, msg in exc.errors:
                    _err(f"{'--' + loc.replace('_', '-') if loc in ('profile', 'reference') else loc}: {msg}")
                raise typer.Exit(2) from None
            if report is not None:
                write_json(report, result)
            typer.echo(summary_line(result))
            verdict = "PASSED" if result["passed"] else f"FAILED ({', '.join(result['failed'])})"
            _err(
                f"gate {loaded.name} (hash {loaded.hash[:12]}) {verdict} on {result['dataset']['rows']} rows"
                + (f": {report}" if report is not None else "")
            )
            if not result["passed"]:
                raise typer.Exit(1)


_data_commands(data_app)


@synth_app.command("arithmetic")
def data_synth_arithmetic(
    out_dir: Path = typer.Argument(..., help="Where to write the JSONL files."),
    max_operand: int = typer.Option(20, "--max-operand", min=1),
    eval_fraction: float = typer.Option(0.15, "--eval-fraction", min=0.01, max=0.9),
    seed: int = typer.Option(0, "--seed"),
):
    """Synthetic addition data in every format the algorithms need, with a held-out eval split."""
    from training_platform.demo.arithmetic import synth_arithmetic

    for name, path in synth_arithmetic(
        out_dir, max_operand=max_operand, eval_fraction=eval_fraction, seed=seed
    ).items():
        typer.echo(f"{name}: {path}")

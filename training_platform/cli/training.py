"""`tp train | verify | config | algorithms | rewards`: the training core on local files.

Exit codes: 0 ok, 1 a run failed (see its error.json), 2 invalid input (config, arguments, dataset rows).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import typer

from training_platform.cli.common import err as _err

config_app = typer.Typer(help="Validate job configs and print their schema.", no_args_is_help=True)
algorithms_app = typer.Typer(help="Training algorithms and the engines that run them.")
rewards_app = typer.Typer(help="Reward functions for RL algorithms: list them, shadow-test a changed one.")


def register(app: typer.Typer) -> None:
    app.command("train")(train_cmd)
    app.command("verify")(verify_cmd)
    app.add_typer(config_app, name="config")
    app.add_typer(algorithms_app, name="algorithms")
    app.add_typer(rewards_app, name="rewards")


def _print_config_errors(exc) -> None:
    for error in exc.errors:
        _err(str(error))
    _err(f"{len(exc.errors)} error(s); nothing was started.")


def _load_config(path: Path, overrides: list[str]) -> dict:
    from training_platform.training.config import apply_overrides, load_yaml

    return apply_overrides(load_yaml(str(path)) or {}, overrides)


@config_app.command("validate")
def config_validate(
    config: Path = typer.Argument(..., help="Job config YAML."),
    set_: list[str] = typer.Option([], "--set", help="Override KEY=VALUE (YAML value), repeatable."),
    no_disk: bool = typer.Option(False, "--no-disk", help="Skip the checks that read files and the model."),
):
    """Check a config: types, ranges, cross-field rules, files, model and dataset rows. Exit 2 on any error."""
    from training_platform.training.config import ConfigError
    from training_platform.training.preflight import validate_config

    try:
        cfg = validate_config(_load_config(config, set_), check_disk=not no_disk)
    except ConfigError as exc:
        _print_config_errors(exc)
        raise typer.Exit(2) from None
    typer.echo(f"OK: {config} ({cfg.algorithm.name}, engine {cfg.engine})")


@config_app.command("schema")
def config_schema():
    """Print the job config's JSON Schema (the UI's launch form is generated from it)."""
    from training_platform.training.config import json_schema

    typer.echo(json.dumps(json_schema(), indent=2))


def train_cmd(
    config: Path = typer.Argument(..., help="Job config YAML."),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Run directory (default: $TP_DATA_DIR/runs/<run-id>)."
    ),
    resume: Path | None = typer.Option(None, "--resume", help="Continue this run from its latest checkpoint."),
    set_: list[str] = typer.Option([], "--set", help="Override KEY=VALUE (YAML value), repeatable."),
    stop_at_step: int | None = typer.Option(
        None, "--stop-at-step", min=1, help="Stop cleanly (with a checkpoint) after this step."
    ),
    ray_address: str | None = typer.Option(
        None, "--ray-address", help="Ray cluster for resources.launcher ray (default: $TP_RAY_ADDRESS)."
    ),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="Validate and print the effective config (and the generated verl config for engine verl); train nothing.",
    ),
):
    """Validate, then train (one process, or every rank through the config's launcher). Prints the run directory
    as the last line."""
    from training_platform.training.config import ConfigError
    from training_platform.training.runner import TrainingFailed, train

    if output is not None and resume is not None:
        _err("--output: cannot be combined with --resume (a resumed run keeps its directory)")
        raise typer.Exit(2)
    if ray_address:
        os.environ["TP_RAY_ADDRESS"] = ray_address
    if dry_run:
        from training_platform.training.runner import dry_run as plan

        if resume is not None:
            _err("--dry-run: cannot be combined with --resume")
            raise typer.Exit(2)
        try:
            typer.echo(plan(_load_config(config, []), overrides=set_, output=output), nl=False)
        except ConfigError as exc:
            _print_config_errors(exc)
            raise typer.Exit(2) from None
        return
    try:
        raw = _load_config(config, [])
        result = train(raw, overrides=set_, output=output, resume=resume, stop_at_step=stop_at_step)
    except ConfigError as exc:
        _print_config_errors(exc)
        raise typer.Exit(2) from None
    except TrainingFailed as exc:
        _err(f"FATAL: {exc}")
        _err(f"details: {exc.run_dir / 'error.json'}  bundle: {exc.run_dir / 'failpack.tgz'}")
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        _err("FATAL: interrupted")
        raise typer.Exit(1) from None
    if result.status == "stopped":
        _err(
            f"stopped at step {result.step} ({result.stop_reason}); continue with: "
            f"tp train {config} --resume {result.run_dir}"
        )
    else:
        _err(f"finished at step {result.step}")
    typer.echo(str(result.run_dir))


def verify_cmd(run_dir: Path = typer.Argument(..., help="A run directory.")):
    """Re-hash every file the run's manifest recorded; exit 1 on any mismatch."""
    from training_platform.training.rundir import verify

    if not run_dir.is_dir():
        _err(f"no such run directory: {run_dir}")
        raise typer.Exit(2)
    checked, problems = verify(run_dir)
    for problem in problems:
        _err(f"MISMATCH {problem}")
    if problems:
        _err(f"{len(problems)} problem(s) in {checked} checked file(s)")
        raise typer.Exit(1)
    typer.echo(f"OK: {checked} files match the manifest")


@algorithms_app.callback(invoke_without_command=True)
def algorithms_default(ctx: typer.Context):
    """Without a subcommand: the same as `tp algorithms list`."""
    if ctx.invoked_subcommand is None:
        algorithms_list(as_json=False)


@algorithms_app.command("list")
def algorithms_list(as_json: bool = typer.Option(False, "--json", help="One JSON object per (engine, algorithm).")):
    """The (engine, algorithm) capability table: data kind, resume, launchers, model kinds, reward functions."""
    from training_platform.training.engines import capability_table

    rows = capability_table()
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    header = f"{'ENGINE':7s} {'ALGORITHM':12s} {'DATA':10s} {'RESUME':6s} {'LAUNCHERS':22s} {'MODEL':23s} DESCRIPTION"
    typer.echo(header)
    for r in rows:
        typer.echo(
            f"{r['engine']:7s} {r['algorithm']:12s} {r['data_kind']:10s} {'yes' if r['resume'] else 'no':6s} "
            f"{','.join(r['launchers']):22s} {','.join(r['model_kinds']):23s} {r['description']}"
            + (f" [{r['notes']}]" if r["notes"] else "")
        )


@rewards_app.callback(invoke_without_command=True)
def rewards_default(ctx: typer.Context):
    """Without a subcommand: the same as `tp rewards list`."""
    if ctx.invoked_subcommand is None:
        rewards_cmd()


@rewards_app.command("list")
def rewards_cmd():
    """List the reward functions for RL algorithms."""
    from training_platform.training.rewards import REWARDS

    for name, definition in sorted(REWARDS.items()):
        typer.echo(f"{name:26s} {definition.description}")


@rewards_app.command("shadow")
def rewards_shadow(
    old: str = typer.Option(
        ...,
        "--old",
        help="The current scorer: NAME, NAME:key=value,..., JSON, or a YAML/JSON file of a reward section.",
    ),
    new: str = typer.Option(..., "--new", help="The changed scorer (same forms as --old)."),
    data: Path = typer.Option(
        ..., "--data", help="JSONL/JSON/Parquet/CSV rows with prompt, completion and the columns the rewards read."
    ),
    limit: int = typer.Option(
        500, "--limit", help="Items scored: a seeded sample of at most this many rows (1..100000)."
    ),
    repeats: int = typer.Option(3, "--repeats", help="Calls per item and scorer, for the variance (1..50)."),
    top_k: int = typer.Option(10, "--top-k", help="k of the top-k overlap."),
    seed: int = typer.Option(0, "--seed"),
    min_spearman: float = typer.Option(0.8, "--min-spearman", help="Pass needs Spearman >= this."),
    max_unstable: float = typer.Option(
        0.0, "--max-unstable", help="Pass needs the new scorer's share of items with variance > 0.08 <= this."
    ),
    report: Path | None = typer.Option(None, "--report", help="Write the JSON report here."),
):
    """Score the same sample with both scorers: Spearman, Kendall, top-k overlap, per-item variance across repeated
    calls. Exit 0 pass, 1 fail, 2 bad input."""
    from training_platform.training.rewards.shadow import ShadowInputError, shadow_report

    try:
        result = shadow_report(
            old,
            new,
            data,
            limit=limit,
            repeats=repeats,
            seed=seed,
            top_k=top_k,
            min_spearman=min_spearman,
            max_unstable_share=max_unstable,
        )
    except ShadowInputError as exc:
        for field, reason in exc.errors:
            _err(f"{field}: {reason}")
        raise typer.Exit(2) from None
    if report is not None:
        from training_platform.core.files import write_json

        write_json(report, result)

    def show(value):
        return "n/a" if value is None else f"{value:.4f}"

    typer.echo(
        f"items {result['items_scored']}/{result['items']} (of {result['rows_in_file']} rows), repeats "
        f"{result['repeats']}"
    )
    typer.echo(
        f"spearman {show(result['spearman'])}  kendall {show(result['kendall'])}  "
        f"top-{result['top_k']} overlap {show(result['top_k_overlap'])}"
    )
    for side in ("old", "new"):
        st = result["stability"][side]
        typer.echo(
            f"{side}: mean score {show(result['mean_score'][side])}  mean variance {st['mean_variance']:.4f}  "
            f"unstable {st['unstable_share']:.2%}"
        )
    typer.echo(
        f"verdict: {result['verdict'].upper()}" + (f" ({'; '.join(result['reasons'])})" if result["reasons"] else "")
    )
    if result["verdict"] != "pass":
        raise typer.Exit(1)

"""`tp demo prepare`, `tp models create-tiny`: the offline demo assets (tiny model + synthetic data)."""

from __future__ import annotations

from pathlib import Path

import typer

from training_platform.core.paths import data_dir

demo_app = typer.Typer(help="Offline demo assets (tiny model + synthetic data).", no_args_is_help=True)
models_app = typer.Typer(help="Model utilities.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(demo_app, name="demo")
    app.add_typer(models_app, name="models")


@demo_app.command("prepare")
def demo_prepare(force: bool = typer.Option(False, "--force", help="Rebuild even if present.")):
    """Build $TP_DATA_DIR/demo/model (tiny Qwen2 + trained tokenizer), demo/reward_model and demo/data/*."""
    from training_platform.demo import prepare_demo

    paths = prepare_demo(data_dir(), force=force)
    for name, path in paths.items():
        typer.echo(f"{name}: {path}")


@models_app.command("create-tiny")
def models_create_tiny(
    out_dir: Path = typer.Argument(..., help="Where to write the model."), seed: int = typer.Option(0, "--seed")
):
    """Create a tiny Qwen2 model with a freshly trained byte-level BPE tokenizer (offline)."""
    from training_platform.demo.tiny_model import create_tiny_model

    typer.echo(str(create_tiny_model(out_dir, seed=seed)))

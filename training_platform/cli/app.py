"""The `tp` application: one Typer app, each command group added by its module's `register(app)`."""

from __future__ import annotations

import os
import sys

import typer

from training_platform.cli import data, demo, doctor, evaluation, server, training

app = typer.Typer(
    help="training_platform: post-train LLMs (SFT, DPO, KTO, ORPO, SimPO, GRPO, RLOO, PPO, RM).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

training.register(app)  # tp train | verify | config | algorithms | rewards
demo.register(app)  # tp demo prepare | models create-tiny
data.register(app)  # tp data validate | convert | clean | dedup | score | report | gate | synth ...
evaluation.register(app)  # tp eval run | score | report | compare
server.register(app)  # tp up | api | worker | beat | db upgrade | users create
doctor.register(app)  # tp doctor


def main() -> None:  # pragma: no cover
    sys.exit(app())

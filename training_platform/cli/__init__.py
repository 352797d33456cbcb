"""`tp`, the command line: one package, one module per command group (training, demo, data, evaluation, server),
each wired into the app by its `register(app)` (cli/app.py). `python -m training_platform.cli ...` is `tp ...`.

Exit codes: 0 ok, 1 a run failed (see its error.json), 2 invalid input (config, arguments, dataset rows).
"""

from training_platform.cli.app import app, main

__all__ = ["app", "main"]

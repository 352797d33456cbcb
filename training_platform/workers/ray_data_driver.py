"""`python -m training_platform.workers.ray_data_driver REQUEST.json`: a dataset operation as the driver of its Ray
Data stages, in its own process (started by the data worker, workers/data_tasks.py: a cancel terminates it and Ray
then stops the tasks it owned). The request names the operation, its params, the input, the scratch dir and where
to write the outcome (pickled: {"output": OperationOutput} or {"error_type", "error"}) and the progress events
(JSON, replaced as blocks complete)."""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path

from training_platform.core.files import write_json
from training_platform.core.settings import get_settings
from training_platform.services import dataset_operations


def main(request_file: str) -> int:
    request = json.loads(Path(request_file).read_text())

    def progress(event: dict) -> None:
        write_json(request["progress"], {**event, "executor": "ray"})

    try:
        output = dataset_operations.run_operation(
            request["operation"],
            request["params"],
            Path(request["source"]),
            Path(request["workdir"]),
            get_settings(),
            executor="ray",
            on_progress=progress,
        )
        outcome: dict = {"output": output}
    except Exception as exc:  # noqa: BLE001 - handed to the data worker, which fails the job with it
        outcome = {"error_type": type(exc).__name__, "error": str(exc)}
    with open(request["result"], "wb") as f:
        pickle.dump(outcome, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

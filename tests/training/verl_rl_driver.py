"""Run verl's RL driver (rl.run_driver) on a Ray cluster, stop it once verl has started its own actors, and print
what is left on the cluster as JSON. Used by test_verl.py in its own process: the driver joins the cluster."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import yaml


def main(config_path: str, run_dir: str, address: str) -> None:
    import ray

    from training_platform.training.engines.verl import engine
    from training_platform.training.engines.verl.rl import run_driver
    from training_platform.training.preflight import validate_config
    from training_platform.training.rundir import RunDir
    from training_platform.training.stop_signal import StopSignal

    loaded: dict = {}
    cfg = validate_config(
        yaml.safe_load(Path(config_path).read_text()) | {"engine": "verl"}, loaded=loaded, dry_run=True
    )
    run = Path(run_dir)
    run_files = RunDir(run)
    run_files.create()
    # The prompts' parquet and the reward module, as the runner writes them: the TaskRunner reads them once
    # started, which can come before the stop under load.
    engine.prepare_rl_inputs(cfg, run_files, loaded)
    config = engine.verl_config(cfg, engine.planned_paths(cfg, run))
    stop_file = run / "STOP"
    seen: dict = {}

    def actor_rows(*states: str) -> dict[str, str]:  # id -> class, from the GCS (the state API needs a dashboard)
        from ray._private.state import actors as actor_table

        return {i: a["ActorClassName"] for i, a in actor_table().items() if a["State"] in states}

    live = ("ALIVE", "PENDING_CREATION", "DEPENDENCIES_UNREADY", "RESTARTING")

    def tick() -> None:
        """Stop once verl's TaskRunner runs and has asked for its TransferQueue actors (placed or pending): the
        moment a user's stop finds actors of the driver on the cluster. Not later: on this cluster (no logical
        GPUs) verl's resource check can fail the run soon after."""
        now = time.monotonic()
        if "stop" in seen:
            return
        mine = {i: c for i, c in actor_rows(*live).items() if i not in before}
        running = "TaskRunnerV1" in actor_rows("ALIVE").values()
        if (running and len(mine) > 2) or now - seen.setdefault("start", now) > 240:
            seen.update(actors=sorted(mine.values()), stop=now)
            stop_file.touch()

    # Actors other tests left on the shared cluster (Ray Train's detached coordinator) are not the driver's.
    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    before = set(actor_rows("ALIVE", "PENDING_CREATION", "DEPENDENCIES_UNREADY", "RESTARTING"))
    ray.shutdown()
    reason = run_driver(
        config, address=address, env={}, should_stop=lambda: StopSignal(stop_file).poll(0), on_tick=tick
    )
    stopped_in = time.monotonic() - seen["stop"]
    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    time.sleep(2)
    left = sorted(c for i, c in actor_rows(*live).items() if i not in before)
    ray.shutdown()
    print(json.dumps({"reason": reason, "stopped_in": stopped_in, "started": seen["actors"], "left": left}))


if __name__ == "__main__":
    main(*sys.argv[1:])

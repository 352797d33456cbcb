"""verl RL's run directory, kept by our process while verl's driver trains: its file logger's rows become
metrics.jsonl rows (our names, a step once across attempts), its global_step_N checkpoints become step_NNNNNN."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("verl")

from verl.utils.tracking import FileLogger  # noqa: E402

from training_platform.training.engines.verl.rl import CheckpointWatcher, LogFollower, attempt_log  # noqa: E402
from training_platform.training.run_writer import RunWriter  # noqa: E402
from training_platform.training.rundir import RunDir  # noqa: E402

pytestmark = pytest.mark.unit


def verl_row(step: int) -> dict:
    return {
        "actor/pg_loss": 0.5 - step / 100,
        "critic/score/mean": step / 10,
        "actor/entropy": 2.0,
        "response_length/mean": 17.5,
        "training/epoch": 1,
        "timing_s/gen": 0.25,
    }


def verl_logger(path, monkeypatch) -> FileLogger:
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    return FileLogger("training_platform", "run")


@pytest.fixture
def run(tmp_path):
    run = RunDir(tmp_path / "run")
    run.create()
    return run


def metrics(run: RunDir) -> list[dict]:
    return [json.loads(line) for line in run.metrics_file.read_text().splitlines()]


def test_verls_file_logger_rows_are_merged_once_with_our_names(run, monkeypatch):
    writer = RunWriter(run, background=False)
    first = attempt_log(run.path, 1)
    first.parent.mkdir(parents=True)
    logger = verl_logger(first, monkeypatch)
    follower = LogFollower(first, writer, after_step=0)
    assert follower.poll() == 0, "nothing written yet"
    for step in (1, 2, 3):
        logger.log(verl_row(step), step)
    assert follower.poll() == 3 and follower.poll() == 0
    with first.open("ab") as f:  # a row verl is still writing is left for the next poll
        f.write(b'{"step": 4, "data": {"actor/pg_loss"')
    assert follower.poll() == 0
    logger.finish()
    rows = metrics(run)
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rows[0]["loss"] == 0.49 and rows[0]["reward"] == 0.1 and rows[0]["entropy"] == 2.0
    assert rows[0]["completions/mean_length"] == 17.5 and rows[0]["epoch"] == 1
    assert rows[0]["timing_s/gen"] == 0.25, "verl's own name kept when we have no equivalent"

    # A resumed attempt from the checkpoint at step 2: its own file (verl's logger truncates the one it opens);
    # metrics.jsonl was truncated after step 2 by the runner, and verl logs steps 3.. again.
    run.truncate_metrics_after(2)
    second = attempt_log(run.path, 2)
    logger = verl_logger(second, monkeypatch)
    follower = LogFollower(second, writer, after_step=2)
    for step in (2, 3, 4, 5):  # a re-logged step 2 too: kept out
        logger.log(verl_row(step), step)
    logger.finish()
    assert follower.poll() == 3
    assert [r["step"] for r in metrics(run)] == [1, 2, 3, 4, 5], "no step twice, none lost"
    assert first.is_file(), "the first attempt's file is kept as verl wrote it"


def test_checkpoints_are_registered_once_verl_recorded_them(run):
    writer = RunWriter(run, background=False, keep_last=2)
    local = run.path / "verl" / "checkpoints"
    watcher = CheckpointWatcher(local, writer, after_step=0)

    def save(step: int, record: bool = True) -> None:  # the layout verl's trainer writes
        (local / f"global_step_{step}" / "actor").mkdir(parents=True)
        (local / f"global_step_{step}" / "actor" / "model_world_size_1_rank_0.pt").write_bytes(b"w" * step)
        (local / f"global_step_{step}" / "data.pt").write_bytes(b"d")
        if record:
            (local / "latest_checkpointed_iteration.txt").write_text(str(step))

    assert watcher.poll() is None
    save(2, record=False)
    assert watcher.poll() is None, "still being written: verl has not recorded it"
    (local / "latest_checkpointed_iteration.txt").write_text("2")
    assert watcher.poll() == 2
    target = run.checkpoints / "step_000002" / "global_step_2"
    assert (target / "actor" / "model_world_size_1_rank_0.pt").read_bytes() == b"ww"
    assert (run.checkpoints / "latest").resolve().name == "step_000002"
    save(4)
    save(6)  # two saves between polls
    assert watcher.poll() == 6 and watcher.poll() is None
    assert [p.name for p in run.checkpoint_dirs()] == ["step_000004", "step_000006"], "keep_last=2 rotates"
    manifest = (run.path / "manifest.jsonl").read_text()
    assert "step_000006/global_step_6/actor/model_world_size_1_rank_0.pt" in manifest
    assert json.loads((run.path / "run.json").read_text())["last_checkpoint"] == "step_000006"

    # A stop between verl's save of step 8 and its log line for step 8: step 8 is no resume point (a resume from it
    # would never log step 8); it waits for its metrics row, and a stopped run drops it.
    save(8)
    assert watcher.poll(up_to=7) is None and (local / "global_step_8").is_dir()
    watcher.drop_unregistered()
    assert not (local / "global_step_8").exists() and run.latest_checkpoint().name == "step_000006"
    save(10)
    assert watcher.poll(up_to=10) == 10, "registered once its step is logged"


def test_a_crash_inside_verls_actors_names_the_actor_and_its_error():
    """Ray re-raises an actor's error in each caller: TaskRunner -> worker group -> our rollout server. The job's
    error names the innermost call and its error, not the TaskRunner's wrapper."""
    from ray.exceptions import RayTaskError

    from training_platform.training.engines.verl.rl import VerlActorFailed, actor_failure

    def raised(call: str, cause: BaseException) -> BaseException:
        text = f'\x1b[36mray::{call}()\x1b[39m (pid=1, ip=10.0.0.1)\n  File "x.py", line 1\n{cause!r}'
        return RayTaskError(call, text, cause).as_instanceof_cause()

    server = raised("HFRolloutServer.finish_weights_update", KeyError("the actor sent weights it does not have"))
    error = raised("TaskRunnerV1.run", raised("WorkerDict.actor_rollout_update_weights", server))
    failure = actor_failure(error)
    assert isinstance(failure, VerlActorFailed)
    assert str(failure).startswith(
        "verl actor HFRolloutServer.finish_weights_update failed: KeyError: 'the actor sent weights it does not have'"
    ), str(failure)
    assert "TaskRunnerV1.run -> WorkerDict.actor_rollout_update_weights ->" in str(failure)
    assert actor_failure(ValueError("not from Ray")) is None

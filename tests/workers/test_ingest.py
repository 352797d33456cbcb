"""Run-directory ingestion and exit classification, without processes."""

from __future__ import annotations

import json
import os

import pytest

from training_platform.workers.ingest import JsonlTail, checkpoint_digest, metric_points
from training_platform.workers.supervisor import classify_exit

pytestmark = pytest.mark.unit


def test_tail_waits_for_a_partial_last_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    tail = JsonlTail(path)
    assert tail.read_new() == []  # no file yet
    path.write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "lo')
    assert [r["step"] for r in tail.read_new()] == [1]
    with path.open("a") as f:
        f.write('ss": 1.5}\n')
    assert tail.read_new() == [{"step": 2, "loss": 1.5}]
    assert tail.read_new() == []


def test_tail_rereads_a_file_that_was_replaced_or_shrank(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s}) + "\n" for s in range(1, 6)))
    tail = JsonlTail(path)
    assert len(tail.read_new()) == 5
    # --resume from step 3: the core rewrites the file (atomic replace: a new inode, a smaller size)
    tmp = tmp_path / ".metrics.jsonl.tmp"
    tmp.write_text("".join(json.dumps({"step": s}) + "\n" for s in range(1, 4)))
    os.replace(tmp, path)
    assert [r["step"] for r in tail.read_new()] == [1, 2, 3] and tail.rewrites == 1
    with path.open("a") as f:
        f.write(json.dumps({"step": 4}) + "\n")
    assert [r["step"] for r in tail.read_new()] == [4]
    path.write_text(json.dumps({"step": 1}) + "\n")  # truncated in place
    assert [r["step"] for r in tail.read_new()] == [1] and tail.rewrites == 2


def test_tail_skips_a_corrupt_line(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 1}\nnot json\n{"step": 2}\n')
    assert [r["step"] for r in JsonlTail(path).read_new()] == [1, 2]


def test_metric_points_keep_finite_numbers_only():
    record = {
        "step": 3,
        "ts": 1.7e9,
        "epoch": 0.5,
        "loss": 1.25,
        "grad_norm": None,
        "flag": True,
        "name": "x",
        "nonfinite": ["kl"],
        "tokens": 10,
    }
    assert sorted(metric_points(record)) == [(3, "epoch", 0.5), (3, "loss", 1.25), (3, "tokens", 10.0)]
    assert metric_points({"loss": 1.0}) == []


def test_checkpoint_digest_is_over_sorted_relpath_sha_lines():
    import hashlib

    files = {"b.bin": ("bb", 2), "a.json": ("aa", 3)}
    assert checkpoint_digest(files) == (hashlib.sha256(b"a.json:aa\nb.bin:bb\n").hexdigest(), 5)


@pytest.mark.parametrize(
    ("rc", "info", "cancel", "killed", "expected"),
    [
        (0, {"status": "succeeded", "step": 30}, False, False, "succeeded"),
        (0, {"status": "stopped", "step": 7}, True, False, "cancelled"),
        (0, {"status": "stopped", "step": 7, "stop_reason": "SIGTERM"}, False, False, "queued"),
        (1, {"status": "failed"}, False, False, "failed"),
        (2, {}, False, False, "failed"),
        (-9, {"step": 4}, False, False, "failed"),
        (-15, {"step": 4}, True, True, "cancelled"),
        (3, {}, False, False, "failed"),
    ],
)
def test_classify_exit(rc, info, cancel, killed, expected):
    status, reason, error = classify_exit(
        rc,
        run_info=info,
        error_info={"type": "ValueError", "message": "bad\nx"},
        console_tail=["loss: must be > 0", "1 error(s); nothing was started."],
        cancel_requested=cancel,
        killed_by_us=killed,
        shutting_down=False,
    )
    assert status == expected
    assert (error is None) == (expected in ("succeeded", "cancelled", "queued"))
    if rc == 1:
        assert error == "ValueError: bad"
    if rc == 2:
        assert error == "invalid config: loss: must be > 0"
    if rc == -9:
        assert error == "training process killed by SIGKILL (out of memory?) at step 4"


@pytest.fixture
def db_session(tmp_path):
    from sqlmodel import Session, SQLModel, create_engine

    from training_platform.db import crud

    engine = create_engine(f"sqlite:///{tmp_path / 'ingest.db'}")
    SQLModel.metadata.create_all(engine)
    with Session(engine) as session:
        user, _ = crud.create_user(session, "u")
        job = crud.create_job(session, owner=user, name="j", config={"algorithm": {"name": "sft"}})
        session.commit()
        yield session, job.id
    engine.dispose()


def _write_metrics(path, steps, loss=1.0, replace=False):
    text = "".join(json.dumps({"step": s, "ts": 1.0, "loss": loss + s}) + "\n" for s in steps)
    if replace:
        tmp = path.with_name(".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    else:
        with path.open("a") as f:
            f.write(text)


def _loss(session, job_id):
    from sqlmodel import select

    from training_platform.db.models import MetricPoint

    rows = session.exec(
        select(MetricPoint.step, MetricPoint.value).where(MetricPoint.job_id == job_id, MetricPoint.name == "loss")
    ).all()
    return dict(rows)


def test_resume_ingest_ignores_the_old_attempts_steps_until_the_core_truncates(tmp_path, db_session):
    from training_platform.workers.ingest import RunIngest

    session, job_id = db_session
    metrics = tmp_path / "metrics.jsonl"
    _write_metrics(metrics, range(1, 9))  # the previous attempt got to step 8, its checkpoint is at 5
    ingest = RunIngest(job_id, tmp_path, hold_above_step=5)
    ingest.poll(session)
    session.commit()
    ingest.committed()
    assert sorted(_loss(session, job_id)) == [1, 2, 3, 4, 5]
    _write_metrics(metrics, range(1, 6), replace=True)  # --resume truncates (atomic replace)
    _write_metrics(metrics, [6, 7], loss=10.0)  # ... and logs the steps again
    ingest.poll(session)
    session.commit()
    ingest.committed()
    assert _loss(session, job_id) == {**{s: 1.0 + s for s in range(1, 6)}, 6: 16.0, 7: 17.0}


def test_resume_ingest_without_an_old_metrics_file_takes_everything(tmp_path, db_session):
    from training_platform.workers.ingest import RunIngest

    session, job_id = db_session
    ingest = RunIngest(job_id, tmp_path, hold_above_step=5)
    ingest.poll(session)
    session.commit()
    ingest.committed()
    _write_metrics(tmp_path / "metrics.jsonl", [6, 7])
    ingest.poll(session)
    session.commit()
    ingest.committed()
    assert sorted(_loss(session, job_id)) == [6, 7]


def test_a_checkpoint_is_registered_once_all_its_files_are_hashed(tmp_path, db_session):
    from sqlmodel import select

    from training_platform.db.models import Checkpoint
    from training_platform.workers.ingest import RunIngest

    session, job_id = db_session
    ckpt = tmp_path / "checkpoints" / "step_000010"
    ckpt.mkdir(parents=True)
    (ckpt / "a.bin").write_bytes(b"aaa")
    (ckpt / "b.json").write_bytes(b"{}")
    manifest = tmp_path / "manifest.jsonl"

    def record(entry):
        with manifest.open("a") as f:
            f.write(json.dumps(entry) + "\n")

    record({"kind": "config", "path": "config_effective.yaml", "sha256": "c", "bytes": 1})
    record({"kind": "checkpoint", "path": "checkpoints/step_000010/a.bin", "sha256": "sa", "bytes": 3, "step": 10})
    ingest = RunIngest(job_id, tmp_path)
    ingest.poll(session)
    session.commit()
    ingest.committed()
    assert session.exec(select(Checkpoint)).all() == []  # b.json not hashed yet
    record({"kind": "checkpoint", "path": "checkpoints/step_000010/b.json", "sha256": "sb", "bytes": 2, "step": 10})
    ingest.poll(session)
    session.commit()
    ingest.committed()
    (row,) = session.exec(select(Checkpoint)).all()
    assert (row.step, row.path, row.size_bytes, row.removed) == (10, str(ckpt), 5, False)
    assert row.sha256 == checkpoint_digest({"a.bin": ("sa", 3), "b.json": ("sb", 2)})[0]
    record({"kind": "removed", "path": "checkpoints/step_000010"})
    ingest.poll(session)
    session.commit()
    ingest.committed()
    session.refresh(row)
    assert row.removed is True


def test_points_read_in_a_failed_transaction_are_written_by_the_next_one(tmp_path, db_session):
    from training_platform.workers.ingest import RunIngest

    session, job_id = db_session
    _write_metrics(tmp_path / "metrics.jsonl", [1, 2])
    ingest = RunIngest(job_id, tmp_path)
    ingest.poll(session)
    session.rollback()  # the commit failed: the database has nothing, the file offsets moved on
    assert _loss(session, job_id) == {}
    _write_metrics(tmp_path / "metrics.jsonl", [3])
    ingest.poll(session)
    session.commit()
    ingest.committed()
    assert sorted(_loss(session, job_id)) == [1, 2, 3]


def test_each_point_keeps_the_time_its_row_was_logged(tmp_path, db_session):
    """Charts over wall-clock time and the ETA read when a step was logged (the row's `ts`), not when it was
    ingested."""
    from datetime import UTC, datetime

    from sqlmodel import select

    from training_platform.db.models import MetricPoint
    from training_platform.workers.ingest import RunIngest

    session, job_id = db_session
    (tmp_path / "metrics.jsonl").write_text(
        json.dumps({"step": 1, "ts": 1_700_000_000.5, "loss": 2.0}) + "\n" + json.dumps({"step": 2, "loss": 1.5}) + "\n"
    )  # no ts: the time of the insert
    ingest = RunIngest(job_id, tmp_path)
    ingest.poll(session)
    session.commit()
    ingest.committed()
    when = dict(session.exec(select(MetricPoint.step, MetricPoint.ts).where(MetricPoint.job_id == job_id)).all())
    assert when[1].replace(tzinfo=UTC) == datetime.fromtimestamp(1_700_000_000.5, UTC)
    assert when[2].replace(tzinfo=UTC) > datetime(2026, 1, 1, tzinfo=UTC)

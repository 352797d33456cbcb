"""GET /jobs/{id}/checkpoints/{name}/archive: a checkpoint or final/ as a tar (or tar.gz) built on the fly, with the
manifest's hashes inside, the owner's (and admins') only, symlinks in a hostile run dir never followed."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import uuid
from pathlib import Path

import pytest
from api_helpers import set_status, valid_config

from training_platform.db import crud
from training_platform.db.models import User
from training_platform.db.session import session_scope
from training_platform.training.archive import CHUNK, plan_archive, stream_archive
from training_platform.training.rundir import RunDir

pytestmark = pytest.mark.integration


def _job_with_run(api, owner: str = "alice") -> tuple[int, Path]:
    with session_scope() as s:
        job_id = crud.create_job(s, owner=s.get(User, api.user_ids[owner]), name="archive", config=valid_config()).id
    run = api.data_dir / "runs" / f"job-{job_id}-archive-{uuid.uuid4().hex[:8]}"
    step = run / "checkpoints" / "step_000020"
    (step / "sub").mkdir(parents=True)
    (step / "model.safetensors").write_bytes(os.urandom(CHUNK * 2 + 1234))  # more than one chunk
    (step / "config.json").write_text('{"a": 1}\n')
    (step / "sub" / "nested.txt").write_text("nested\n")
    (step / "empty.bin").write_bytes(b"")
    (run / "final").mkdir()
    (run / "final" / "weights.bin").write_bytes(b"final weights")
    rundir = RunDir(run)
    rundir.record_tree("checkpoint", step, step=20)
    rundir.record_tree("final", run / "final")
    # A hostile run dir: links out of it, inside the checkpoint and in place of a checkpoint.
    (step / "passwd").symlink_to("/etc/passwd")
    (step / "etc").symlink_to("/etc")
    (run / "checkpoints" / "step_000030").symlink_to("/etc")
    (run / "final_adapter").symlink_to(api.data_dir / "demo")
    set_status(job_id, "succeeded", run_dir=str(run))
    return job_id, run


@pytest.fixture(scope="module")
def job(sqlite_api):
    return _job_with_run(sqlite_api)


def _files(directory: Path) -> dict[str, bytes]:
    """Regular files under `directory` (symlinks not followed), keyed `<dir name>/<relative path>`."""
    out = {}
    for root, _dirs, names in os.walk(directory):  # followlinks=False
        for name in names:
            path = Path(root) / name
            if not path.is_symlink():
                out[str(path.relative_to(directory.parent))] = path.read_bytes()
    return out


def _check_archive(data: bytes, mode: str, directory: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(data), mode=mode) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert all(m.isfile() for m in members.values())
        got = {name: tar.extractfile(m).read() for name, m in members.items()}
    manifest = got.pop("MANIFEST.sha256").decode()
    expected = _files(directory)
    assert got == expected
    assert not any("passwd" in name or "/etc" in name for name in got)
    hashes = dict(reversed(line.split("  ", 1)) for line in manifest.splitlines())
    assert set(hashes) == set(expected)  # every archived file is in the manifest, with its recorded sha256
    for name, content in expected.items():
        assert hashes[name] == hashlib.sha256(content).hexdigest(), name


def test_archive_tar_matches_run_dir(sqlite_api, job):
    job_id, run = job
    r = sqlite_api.get(f"/jobs/{job_id}/checkpoints/step_000020/archive")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/x-tar"
    assert r.headers["content-disposition"] == f'attachment; filename="job-{job_id}-step_000020.tar"'
    assert r.headers["x-tp-skipped-files"] == "2" and r.headers["x-tp-archive-files"] == "4"
    _check_archive(r.content, "r:", run / "checkpoints" / "step_000020")
    # an admin may download it too
    assert sqlite_api.get(f"/jobs/{job_id}/checkpoints/step_000020/archive", user="root").status_code == 200


def test_archive_tar_gz_and_final(sqlite_api, job):
    job_id, run = job
    r = sqlite_api.get(f"/jobs/{job_id}/checkpoints/step_000020/archive?format=tar.gz")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/gzip"
    assert r.headers["content-disposition"] == f'attachment; filename="job-{job_id}-step_000020.tar.gz"'
    _check_archive(r.content, "r:gz", run / "checkpoints" / "step_000020")
    r = sqlite_api.get(f"/jobs/{job_id}/checkpoints/final/archive")
    assert r.status_code == 200, r.text
    _check_archive(r.content, "r:", run / "final")


def test_archive_streams_in_bounded_chunks(job):
    _, run = job
    plan = plan_archive(run, "step_000020")
    sizes = [len(chunk) for chunk in stream_archive(plan)]
    assert len(sizes) > 3 and max(sizes) <= CHUNK + 2 * 10240  # never a whole file at once


@pytest.mark.parametrize(
    "name, codes",
    [
        ("step_000030", {404}),  # a symlink to /etc in place of a checkpoint
        ("final_adapter", {404}),  # a symlink to another directory
        ("step_000099", {404}),  # missing
        ("latest", {422}),
        ("step_1", {422}),
        ("..", {404, 422}),
        ("..%2F..%2Fetc", {404, 422}),
        ("step_000020%2F..%2F..", {404, 422}),
        ("final%00", {404, 422}),
    ],
)
def test_archive_refuses_bad_names(sqlite_api, job, name, codes):
    job_id, _ = job
    r = sqlite_api.get(f"/jobs/{job_id}/checkpoints/{name}/archive")
    assert r.status_code in codes, (name, r.status_code, r.text)


def test_archive_of_another_users_job_is_404(sqlite_api, job):
    job_id, _ = job
    r = sqlite_api.get(f"/jobs/{job_id}/checkpoints/step_000020/archive", user="bob")
    assert r.status_code == 404 and "root:" not in r.text
    assert (
        sqlite_api.get(f"/jobs/{job_id}/checkpoints/step_000020/archive", headers={"Authorization": ""}).status_code
        == 401
    )


def test_archive_of_a_run_dir_outside_the_data_dir_is_404(sqlite_api, tmp_path):
    with session_scope() as s:
        job_id = crud.create_job(
            s, owner=s.get(User, sqlite_api.user_ids["alice"]), name="outside", config=valid_config()
        ).id
    (tmp_path / "final").mkdir()
    (tmp_path / "final" / "x").write_text("x")
    set_status(job_id, "succeeded", run_dir=str(tmp_path))
    assert sqlite_api.get(f"/jobs/{job_id}/checkpoints/final/archive").status_code == 404

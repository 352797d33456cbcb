"""The files of a deleted job (training_platform.services.job_files): what goes, what the retention rule keeps."""

from __future__ import annotations

import pytest

from training_platform.services.job_files import job_paths, remove_job_files

pytestmark = pytest.mark.unit


def _job(data_dir, job_id: int) -> None:
    runs = data_dir / "runs"
    (runs / f"job-{job_id}" / "checkpoints" / "step_000005").mkdir(parents=True)
    (runs / f"job-{job_id}" / "final").mkdir()
    (runs / f"job-{job_id}" / "final" / "model.safetensors").write_bytes(b"x")
    (runs / f"job-{job_id}.attempt-1").mkdir()
    for suffix in ("config.yaml", "console.log", "lock"):
        (runs / f"job-{job_id}.{suffix}").write_text("x")
    (data_dir / "evals" / f"job-{job_id}").mkdir(parents=True)


def test_everything_of_the_job_goes_and_nothing_of_job_12(tmp_path):
    _job(tmp_path, 1)
    _job(tmp_path, 12)
    assert len(job_paths(1, tmp_path)) == 6
    removal = remove_job_files(1, tmp_path, run_dir=str(tmp_path / "runs" / "job-1"))
    assert sorted(removal.removed) == [
        "evals/job-1",
        "runs/job-1",
        "runs/job-1.attempt-1",
        "runs/job-1.config.yaml",
        "runs/job-1.console.log",
        "runs/job-1.lock",
    ]
    assert removal.kept == [] and job_paths(1, tmp_path) == []
    assert len(job_paths(12, tmp_path)) == 6


def test_a_registered_models_directory_is_kept(tmp_path):
    _job(tmp_path, 3)
    final = (tmp_path / "runs" / "job-3" / "final").resolve()
    removal = remove_job_files(3, tmp_path, keep={final: "registered model 'm' points here"})
    assert removal.kept == [("runs/job-3/final", "registered model 'm' points here")]
    assert (final / "model.safetensors").is_file()
    assert not (tmp_path / "runs" / "job-3" / "checkpoints").exists()
    assert "runs/job-3/checkpoints" in removal.removed and "runs/job-3" not in removal.removed


def test_symlinks_and_paths_outside_the_data_dir_are_never_followed(tmp_path):
    data_dir = tmp_path / "data"
    outside = tmp_path / "outside"
    (outside / "run").mkdir(parents=True)
    (outside / "run" / "precious").write_text("keep")
    (data_dir / "runs").mkdir(parents=True)
    (data_dir / "runs" / "job-4").symlink_to(outside / "run")  # a run dir that is a symlink
    (data_dir / "runs" / "job-5").mkdir()
    (data_dir / "runs" / "job-5" / "link").symlink_to(outside)  # a symlink inside a run dir

    removal = remove_job_files(4, data_dir, run_dir=str(outside / "run"))
    assert (outside / "run" / "precious").read_text() == "keep"
    assert ("runs/job-4", "a symlink (its target is not the platform's)") in removal.kept
    assert ("run", "outside the data directory") in removal.kept

    remove_job_files(5, data_dir)
    assert not (data_dir / "runs" / "job-5").exists() and (outside / "run" / "precious").exists()

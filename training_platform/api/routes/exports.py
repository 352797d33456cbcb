"""Export: a job's checkpoint, `final/` or `final_adapter/` downloaded as a tar (or tar.gz) streamed as it is built
(training/archive.py: no temporary file, a chunk at a time), with `MANIFEST.sha256` (the run manifest's hashes of
the archived files) inside so the download can be checked with `sha256sum -c`."""

from __future__ import annotations

from pathlib import Path as FsPath
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query
from fastapi.responses import StreamingResponse

from training_platform.api import errors
from training_platform.api.deps import SettingsDep, VisibleJob
from training_platform.api.errors import conflict, not_found
from training_platform.training.archive import NAME_PATTERN, ArchiveError, ArchiveNotFound, plan_archive, stream_archive

router = APIRouter(prefix="/jobs", tags=["checkpoints"])

CheckpointName = Annotated[
    str,
    Path(
        min_length=4,
        max_length=20,
        pattern=NAME_PATTERN,
        description="`step_NNNNNN` (a checkpoint), `final` or `final_adapter`.",
    ),
]

_MEDIA = {"tar": "application/x-tar", "tar.gz": "application/gzip"}


@router.get(
    "/{job_id}/checkpoints/{name}/archive",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {"application/x-tar": {}, "application/gzip": {}},
            "description": "The directory as a tar (or tar.gz) archive: `<name>/...` and `MANIFEST.sha256`.",
        },
        **errors.responses(404, 409),
    },
)
def checkpoint_archive(
    job: VisibleJob,
    name: CheckpointName,
    settings: SettingsDep,
    format: Annotated[Literal["tar", "tar.gz"], Query(description="`tar.gz` compresses.")] = "tar",
):
    """Downloads a checkpoint (or the final model) of the job as an archive built on the fly. Symbolic links and
    special files inside it are skipped (their count is in `X-TP-Skipped-Files`), never followed."""
    what = f"{name} of job {job.id}"
    if not job.run_dir:
        raise not_found(what)
    run_dir = FsPath(job.run_dir).resolve()
    if not run_dir.is_relative_to(settings.data_path):  # a run dir is always inside TP_DATA_DIR
        raise not_found(what)
    try:
        plan = plan_archive(run_dir, name)
    except ArchiveNotFound:
        raise not_found(what) from None
    except ArchiveError as exc:
        raise conflict(f"cannot archive {what}: {exc}") from None
    filename = f"job-{job.id}-{name}.{format}"
    return StreamingResponse(
        stream_archive(plan, compress=format == "tar.gz"),
        media_type=_MEDIA[format],
        headers={
            "Content-Disposition": f'attachment; filename="{filename}"',
            "X-TP-Archive-Files": str(len(plan.files)),
            "X-TP-Skipped-Files": str(len(plan.skipped)),
            "Cache-Control": "no-store",
        },
    )

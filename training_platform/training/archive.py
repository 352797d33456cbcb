"""A checkpoint (`checkpoints/step_NNNNNN`), `final/` or `final_adapter/` of a run directory as a tar stream, built
on the fly: no temporary file, at most one chunk of one file in memory.

    plan = plan_archive(run_dir, "step_000040")            # ArchiveNotFound: no such directory (or a symlink)
    for chunk in stream_archive(plan, compress=False):     # bytes: a POSIX (pax) tar, gzip-compressed on request
        ...

The archive holds `<name>/<files...>` and, last, `MANIFEST.sha256`: the run's manifest entries (sha256 recorded
when the files were written) for the files in the archive, in `sha256sum -c` format, so a download is verified with
`tar xf job-1-step_000040.tar && sha256sum -c MANIFEST.sha256`.

A run directory is written by a training process, so it is not trusted: the name is one of the fixed forms, every
path component is opened relative to its parent with O_NOFOLLOW (a directory or file swapped for a symlink after
the listing is refused, not followed), symlinks and special files inside the checkpoint are skipped (never
followed, wherever they point), and only regular files are read.
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
import tarfile
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from training_platform.core.errors import Conflict, NotFound

log = logging.getLogger("training_platform.training.archive")

NAME_PATTERN = r"^(step_[0-9]{6,10}|final|final_adapter)$"
_NAME = re.compile(NAME_PATTERN)
CHUNK = 1 << 20
MAX_FILES = 100_000
MAX_DEPTH = 32
MANIFEST_NAME = "MANIFEST.sha256"
_BLOCK = tarfile.BLOCKSIZE
_RECORD = tarfile.RECORDSIZE
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


class ArchiveNotFound(NotFound):
    """No such checkpoint directory in the run (or it is not a plain directory)."""


class ArchiveError(Conflict):
    """The directory changed or could not be read while it was being archived."""


@dataclass
class ArchivePlan:
    run_dir: Path
    name: str
    parts: tuple[str, ...]  # the directory inside the run dir, e.g. ("checkpoints", "step_000040")
    files: list[tuple[str, ...]] = field(default_factory=list)  # relative to the directory
    skipped: list[str] = field(default_factory=list)  # symlinks and special files, not archived

    @property
    def prefix(self) -> str:
        return "/".join(self.parts)


def check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError("a checkpoint is named step_NNNNNN (6-10 digits), final or final_adapter")
    return name


def _parts(name: str) -> tuple[str, ...]:
    return ("checkpoints", name) if name.startswith("step_") else (name,)


def _open_dir_chain(root_fd: int, parts: tuple[str, ...]) -> int:
    """An fd of root/parts..., each component opened relative to its parent without following symlinks."""
    fd = os.dup(root_fd)
    try:
        for part in parts:
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def _open_run_dir(run_dir: Path) -> int:
    try:
        return os.open(run_dir, _DIR_FLAGS)
    except OSError as exc:
        raise ArchiveNotFound(f"run directory unreadable: {exc.strerror}") from None


def plan_archive(run_dir: str | Path, name: str) -> ArchivePlan:
    """List what the archive of `name` will hold (metadata only). ArchiveNotFound when the directory is missing, not
    a directory, or a symlink."""
    check_name(name)
    run_dir = Path(run_dir)
    plan = ArchivePlan(run_dir=run_dir, name=name, parts=_parts(name))
    root = _open_run_dir(run_dir)
    try:
        try:
            top = _open_dir_chain(root, plan.parts)
        except OSError:
            raise ArchiveNotFound(f"{plan.prefix} (missing, not a directory, or a symbolic link)") from None
        try:
            _walk(top, (), plan, 0)
        finally:
            os.close(top)
    finally:
        os.close(root)
    plan.files.sort()
    if plan.skipped:
        log.warning(
            "archive of %s/%s: skipped %d symlink(s) or special file(s): %s",
            run_dir.name,
            plan.prefix,
            len(plan.skipped),
            ", ".join(plan.skipped[:10]),
        )
    return plan


def _walk(dir_fd: int, rel: tuple[str, ...], plan: ArchivePlan, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise ArchiveError(f"{plan.prefix}: directories nested deeper than {MAX_DEPTH}")
    with os.scandir(dir_fd) as entries:
        listed = sorted(entries, key=lambda e: e.name)
    for entry in listed:
        path = (*rel, entry.name)
        shown = "/".join(path)
        if entry.is_symlink():
            plan.skipped.append(f"{shown} (symbolic link)")
        elif entry.is_dir(follow_symlinks=False):
            try:
                sub = os.open(entry.name, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError as exc:
                plan.skipped.append(f"{shown} ({exc.strerror})")
                continue
            try:
                _walk(sub, path, plan, depth + 1)
            finally:
                os.close(sub)
        elif entry.is_file(follow_symlinks=False):
            if len(plan.files) >= MAX_FILES:
                raise ArchiveError(f"{plan.prefix}: more than {MAX_FILES} files")
            plan.files.append(path)
        else:
            plan.skipped.append(f"{shown} (not a regular file)")


def manifest_hashes(run_dir: Path, prefix: str) -> dict[str, str]:
    """{path relative to the run dir: sha256} of the manifest's latest entries under `prefix/` (removed trees and
    files out of it aside). Read line by line; a manifest that is a symlink is not read."""
    out: dict[str, str] = {}
    try:
        fd = os.open(run_dir / "manifest.jsonl", _FILE_FLAGS)
    except OSError:
        return out
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return out
        for raw in f:
            try:
                entry = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
                continue
            path = entry["path"]
            if entry.get("kind") == "removed":
                if path == prefix or prefix.startswith(path.rstrip("/") + "/"):
                    out.clear()  # the whole directory was rotated away (then maybe written again)
                continue
            sha = entry.get("sha256")
            if path.startswith(prefix + "/") and isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{64}", sha):
                out[path] = sha
    return out


def _header(arcname: str, size: int, mtime: float, mode: int = 0o644) -> bytes:
    info = tarfile.TarInfo(arcname)
    info.size = size
    info.mtime = int(mtime)
    info.mode = mode
    info.type = tarfile.REGTYPE
    return info.tobuf(format=tarfile.PAX_FORMAT, encoding="utf-8", errors="surrogateescape")


def _tar_chunks(plan: ArchivePlan) -> Iterator[bytes]:
    """The uncompressed tar stream, one header or file chunk at a time."""
    written = 0
    included: list[str] = []
    root = _open_run_dir(plan.run_dir)
    try:
        try:
            top = _open_dir_chain(root, plan.parts)
        except OSError as exc:
            raise ArchiveError(f"{plan.prefix} changed while archiving: {exc.strerror}") from None
        try:
            for rel in plan.files:
                arcname = "/".join((plan.name, *rel))
                try:
                    parent = _open_dir_chain(top, rel[:-1])
                    try:
                        fd = os.open(rel[-1], _FILE_FLAGS, dir_fd=parent)
                    finally:
                        os.close(parent)
                except OSError as exc:  # replaced by a symlink, or removed, since the listing
                    raise ArchiveError(
                        f"{plan.prefix}/{'/'.join(rel)} changed while archiving: {exc.strerror}"
                    ) from None
                with os.fdopen(fd, "rb") as f:
                    st = os.fstat(f.fileno())
                    if not stat.S_ISREG(st.st_mode):
                        raise ArchiveError(f"{plan.prefix}/{'/'.join(rel)} is no longer a regular file")
                    os.set_blocking(f.fileno(), True)
                    header = _header(arcname, st.st_size, st.st_mtime)
                    yield header
                    written += len(header)
                    left = st.st_size
                    while left > 0:
                        block = f.read(min(CHUNK, left))
                        if not block:
                            raise ArchiveError(f"{plan.prefix}/{'/'.join(rel)} shrank while archiving")
                        left -= len(block)
                        written += len(block)
                        yield block
                    pad = (-st.st_size) % _BLOCK
                    if pad:
                        yield b"\0" * pad
                        written += pad
                included.append("/".join(rel))
        finally:
            os.close(top)
    finally:
        os.close(root)
    hashes = manifest_hashes(plan.run_dir, plan.prefix)
    lines = "".join(
        f"{hashes[f'{plan.prefix}/{rel}']}  {plan.name}/{rel}\n" for rel in included if f"{plan.prefix}/{rel}" in hashes
    )
    data = lines.encode("utf-8", errors="surrogateescape")
    header = _header(MANIFEST_NAME, len(data), time.time())
    pad = (-len(data)) % _BLOCK
    yield header + data + b"\0" * pad
    written += len(header) + len(data) + pad
    end = b"\0" * (2 * _BLOCK)
    written += len(end)
    yield end + b"\0" * ((-written) % _RECORD)


def stream_archive(plan: ArchivePlan, *, compress: bool = False, level: int = 6) -> Iterator[bytes]:
    """The archive as chunks of bytes (tar, or tar.gz with `compress`). Errors after the first chunk end the
    stream (the client sees a truncated archive, the log says why)."""
    try:
        if not compress:
            yield from _tar_chunks(plan)
            return
        gz = zlib.compressobj(level, zlib.DEFLATED, 31)  # wbits 31: the gzip container
        pending = bytearray()
        for chunk in _tar_chunks(plan):
            pending += gz.compress(chunk)
            if len(pending) >= CHUNK // 4:
                yield bytes(pending)
                pending.clear()
        pending += gz.flush()
        yield bytes(pending)
    except ArchiveError as exc:
        log.error("archive of %s/%s aborted: %s", plan.run_dir.name, plan.prefix, exc)
        raise

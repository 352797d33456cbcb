"""Which processes did this test start? Every descendant, daemonised or orphaned ones included (Ray's GCS, raylet
and workers), inherits the environment: a test sets TP_TEST_MARK=<unique> in what it starts and finds them by it.
A command-line or start-time scan would also see what another test runs meanwhile (make test runs two workers)."""

from __future__ import annotations

import uuid

import psutil

MARK_VAR = "TP_TEST_MARK"


def new_mark() -> dict[str, str]:
    """The environment entry to add to what a test starts."""
    return {MARK_VAR: uuid.uuid4().hex}


def marked_processes(mark: dict[str, str], *, containing: str = "") -> list[psutil.Process]:
    """Live (not zombie) processes whose environment carries `mark` and whose command line contains `containing`."""
    (value,) = mark.values()
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if containing and not any(containing in part for part in proc.info["cmdline"] or []):
                continue
            if proc.environ().get(MARK_VAR) == value and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found

"""The root-mode uid pool of the sandbox: one uid per running program on the whole host, whichever process or thread
runs it, and the slot of a process that died comes back (no bubblewrap needed: only the claims are tested)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from training_platform.evaluation.sandbox import SandboxUnavailable, _UidPool

pytestmark = pytest.mark.unit

HOLDER = """
import sys, time
from pathlib import Path
from training_platform.evaluation.sandbox import _UidPool
with _UidPool(1000, size=3, lock_dir=Path(sys.argv[1])).acquire() as uid:
    print(uid, flush=True)
    time.sleep(600)
"""


def test_processes_and_threads_never_share_a_uid_and_a_dead_holders_slot_returns(tmp_path):
    lock_dir = tmp_path / "uids"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        held = int(holder.stdout.readline())
        assert held == 1000, "the first free slot"

        pool = _UidPool(1000, size=3, lock_dir=lock_dir)  # this process: the same slots, another claimant
        seen, release = [], threading.Event()

        def use() -> None:
            with pool.acquire() as uid:
                seen.append(uid)
                release.wait(10)

        threads = [threading.Thread(target=use) for _ in range(2)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 10
        while len(seen) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sorted(seen) == [1001, 1002], "neither thread got the other process's uid nor each other's"

        waited = []
        third = threading.Thread(target=lambda: waited.append(_claim(pool)))
        third.start()
        time.sleep(0.3)
        assert not waited, "every slot busy: the claim waits"
        holder.kill()  # the kernel drops a dead process's locks
        holder.wait()
        third.join(10)
        assert waited == [1000]
        release.set()
        for t in threads:
            t.join(10)
    finally:
        holder.kill()
        holder.wait()


def _claim(pool: _UidPool) -> int:
    with pool.acquire(poll_s=0.02) as uid:
        return uid


@pytest.mark.skipif(os.geteuid() != 0, reason="needs a directory owned by another user (root chowns one)")
def test_a_lock_directory_owned_by_someone_else_is_refused(tmp_path):
    lock_dir = tmp_path / "uids"
    lock_dir.mkdir()
    os.chown(lock_dir, 12345, 12345)
    with pytest.raises(SandboxUnavailable, match="belongs to uid 12345"), _UidPool(1, lock_dir=lock_dir).acquire():
        pass


def test_a_symlinked_lock_directory_is_refused(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "uids").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(SandboxUnavailable, match="not a directory"), _UidPool(1, lock_dir=tmp_path / "uids").acquire():
        pass
    assert not list((tmp_path / "elsewhere").iterdir()), "no lock file written through the link"

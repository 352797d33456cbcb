# Over 600 lines: one security boundary (isolation, limits, uid claims, fail-closed checks), reviewed as a whole.
"""A sandbox for untrusted (model-generated) Python programs.

Every program runs in its own bubblewrap (`bwrap`) sandbox:

* namespaces: new PID, network (loopback only, down: no network at all), IPC, UTS and cgroup namespaces, plus a
  user namespace when the caller is not root. The only file system it sees is a fresh tmpfs root holding read-only
  binds of the Python runtime (`/usr` and the interpreter's prefix), a minimal `/dev` and its own `/proc`, a
  size-limited tmpfs `/tmp`, a size-limited writable tmpfs work dir `/work` (its cwd) and the program itself,
  read-only, under `/box`. No `/etc`, no home directories, no project files, no host `/tmp`.
* environment: the bwrap process itself and the program get a minimal environment built from scratch (`PATH`,
  `HOME`, `LANG`, ...), never the caller's (no API keys or tokens).
* limits (`setrlimit`, applied inside the namespaces by a bootstrap that then `exec`s the program): CPU seconds,
  address space (RLIMIT_AS), file size, number of processes and open files; no core dumps; `no_new_privs`.
* privileges: when the caller is root, the program does not run as root: the bootstrap drops to an unprivileged
  uid/gid (a distinct uid per concurrent sandbox so their process limits do not interact) before `exec`.
* wall clock: bwrap runs in its own process group (session) with `--die-with-parent`; on timeout the whole group
  is SIGKILLed, which kills the PID namespace's init and with it every process the program started.

Fail closed: `Sandbox()` probes whether bwrap works here (it needs unprivileged user namespaces when not run as
root) and refuses to run code when it does not, unless the operator explicitly allows unsandboxed execution
(`allow_unsandboxed=True` or `TP_SANDBOX_ALLOW_UNSAFE=1`). Unsandboxed execution still applies the rlimits, a
private temp dir, a minimal environment and the process-group kill, but the program can see the host's files and
network.

Residual risks, documented rather than hidden: the rlimits are per process, so the memory a program can hold is
bounded by `memory_bytes * max_processes` (no cgroup); the kernel itself is shared (a kernel exploit escapes any
namespace sandbox).

This module only uses the standard library (no torch / transformers): it is imported by the scoring CLI and by
worker processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from training_platform.core.errors import Unavailable
from training_platform.core.settings import current_settings

__all__ = [
    "ENV_ALLOW_UNSAFE",
    "IsolationInfo",
    "Sandbox",
    "SandboxLimits",
    "SandboxResult",
    "SandboxUnavailable",
    "detect_isolation",
]

ENV_ALLOW_UNSAFE = "TP_SANDBOX_ALLOW_UNSAFE"
ENV_BWRAP = "TP_SANDBOX_BWRAP"  # path of the bwrap binary (default: found on PATH)
ENV_UID_BASE = "TP_SANDBOX_UID_BASE"  # root only: first uid the programs run as (default 1_500_000_000)

_DEFAULT_UID_BASE = 1_500_000_000  # far above regular, system and systemd-dynamic uids (Settings' default)
_UID_SLOTS = 256
_MiB = 1 << 20

# Runs inside the sandbox as `python -S -s bootstrap.py CONFIG` (no site: the program gets the standard library
# only, and start-up is ~5x faster): apply the limits, drop root, set no_new_privs, then run the program in this
# same interpreter as __main__ (one interpreter start per program, not two).
_BOOTSTRAP = r"""
import json, os, resource, sys
cfg = json.loads(sys.argv[1])
for name, (soft, hard) in cfg["limits"].items():
    resource.setrlimit(getattr(resource, name), (soft, hard))
drop = cfg.get("drop_to")
if drop and (os.getuid() == 0 or os.geteuid() == 0):
    os.setgroups([])
    os.setgid(drop[1])
    os.setuid(drop[0])
    if os.getuid() == 0 or os.geteuid() == 0 or os.getgid() == 0:
        os._exit(125)
try:
    import ctypes
    if ctypes.CDLL(None, use_errno=True).prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        os._exit(126)
except OSError:
    os._exit(126)
os.chdir(cfg["cwd"])
os.environ.clear()
os.environ.update(cfg["env"])
import builtins
builtins.exit = builtins.quit = sys.exit  # normally added by the site module
main = cfg["main"]
sys.argv = [main, *cfg["args"]]
if os.path.dirname(main) not in sys.path:
    sys.path.insert(0, os.path.dirname(main))
del json, resource, drop, cfg, name, soft, hard
import runpy
runpy.run_path(main, run_name="__main__")
"""


class SandboxUnavailable(Unavailable, RuntimeError):
    """Isolation is not available here and unsandboxed execution was not explicitly allowed."""


@dataclass(frozen=True)
class SandboxLimits:
    wall_timeout_s: float = 10.0
    cpu_seconds: int = 10
    memory_bytes: int = 1024 * _MiB  # RLIMIT_AS of each process
    file_size_bytes: int = 16 * _MiB  # RLIMIT_FSIZE: any single file it writes, stdout/stderr included
    max_processes: int = 16  # RLIMIT_NPROC (in its own user namespace, or for its own uid when run as root)
    max_open_files: int = 64
    tmpfs_bytes: int = 64 * _MiB  # size of each of /tmp and /work
    max_output_bytes: int = 64 * 1024  # stdout / stderr kept in the result (each)

    def rlimits(self) -> dict[str, tuple[int, int]]:
        cpu = max(1, int(self.cpu_seconds))
        return {
            "RLIMIT_CPU": (cpu, cpu + 1),  # SIGXCPU at the soft limit, SIGKILL at the hard one
            "RLIMIT_AS": (int(self.memory_bytes), int(self.memory_bytes)),
            "RLIMIT_FSIZE": (int(self.file_size_bytes), int(self.file_size_bytes)),
            "RLIMIT_NPROC": (int(self.max_processes), int(self.max_processes)),
            "RLIMIT_NOFILE": (int(self.max_open_files), int(self.max_open_files)),
            "RLIMIT_CORE": (0, 0),
        }


@dataclass
class SandboxResult:
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    duration_s: float
    isolation: str  # "bwrap" or "none"
    stdout_truncated: bool = False
    stderr_truncated: bool = False  # stderr keeps its last max_output_bytes (where a traceback says what failed)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class IsolationInfo:
    available: bool
    mechanism: str  # "bwrap" or "none"
    mode: str  # "userns" (unprivileged caller) | "root-drop" (root caller, program runs as another uid) | ""
    reason: str  # why it is not available ("" when it is)
    bwrap: str | None = None
    python: str | None = None


def _allow_unsafe_env() -> bool:
    return current_settings().sandbox_allow_unsafe


def runtime_python() -> str:
    """The base interpreter (not the venv: the sandbox gets the standard library only)."""
    base = getattr(sys, "_base_executable", None) or sys.executable
    return os.path.realpath(base)


def _runtime_binds(python: str) -> list[str]:
    """bwrap arguments giving read-only access to the Python runtime and the system libraries it links."""
    args: list[str] = ["--ro-bind", "/usr", "/usr"]
    for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = Path("/") / top
        if host.is_symlink():
            args += ["--symlink", os.readlink(host), f"/{top}"]
        elif host.is_dir():
            args += ["--ro-bind", str(host), f"/{top}"]
    roots: list[str] = []
    for candidate in (os.path.realpath(sys.base_prefix), os.path.dirname(os.path.dirname(python))):
        candidate = os.path.realpath(candidate)
        if candidate in ("/", "/usr") or candidate.startswith("/usr/"):
            continue
        if not any(candidate == r or candidate.startswith(r + "/") for r in roots):
            roots.append(candidate)
    made: set[str] = set()
    for root in roots:
        # Create the parents explicitly world-traversable: bwrap would copy their host modes (e.g. /root is 0700,
        # which the unprivileged uid could not traverse).
        parents = list(Path(root).parents)[::-1][1:]  # without "/"
        for parent in parents:
            if str(parent) not in made:
                made.add(str(parent))
                args += ["--perms", "0755", "--dir", str(parent)]
        args += ["--ro-bind", root, root]
    return args


_SANDBOX_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/work",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONHASHSEED": "0",
    "PYTHONIOENCODING": "utf-8",
}
# The environment of the bwrap process itself (its /proc/<pid>/environ is visible to nobody but root, but keep
# the caller's secrets out of it anyway).
_BWRAP_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}


class _UidPool:
    """Root mode: one unprivileged uid per sandbox running on this host (RLIMIT_NPROC is counted per uid).

    A slot is claimed with `flock` on its own lock file, so the processes of a prefork eval worker, or two workers
    on one host, never hand out the same uid at once (before, each process counted from the first slot, and two
    evaluations' programs could share a uid and its process limit). Each claim opens its own file, so threads of
    one process exclude each other the same way; the kernel drops the locks of a process that dies."""

    def __init__(self, base: int, size: int = _UID_SLOTS, lock_dir: Path | None = None):
        self.base, self.size = base, size
        self.lock_dir = lock_dir or Path(tempfile.gettempdir()) / f"tp-sandbox-uids-{base}"

    def _open_dir(self) -> Path:
        import stat

        self.lock_dir.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(self.lock_dir)  # not followed: a planted symlink must not choose where our locks live
        if not stat.S_ISDIR(info.st_mode):
            raise SandboxUnavailable(f"the uid lock directory {self.lock_dir} is not a directory (a symlink?)")
        if info.st_uid != os.geteuid():  # another user's directory could hand us locks it holds forever
            raise SandboxUnavailable(f"the uid lock directory {self.lock_dir} belongs to uid {info.st_uid}, not to us")
        return self.lock_dir

    @contextlib.contextmanager
    def acquire(self, poll_s: float = 0.05) -> Iterator[int]:
        import fcntl

        directory = self._open_dir()
        while True:
            for slot in range(self.size):
                fd = os.open(directory / f"{slot}.lock", os.O_RDWR | os.O_CREAT, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                try:
                    yield self.base + slot
                finally:
                    os.close(fd)  # releases the lock
                return
            time.sleep(poll_s)  # every slot busy: wait for one


_uid_pool: _UidPool | None = None
_uid_pool_lock = threading.Lock()


def _get_uid_pool() -> _UidPool:
    global _uid_pool
    with _uid_pool_lock:
        if _uid_pool is None:
            _uid_pool = _UidPool(current_settings().sandbox_uid_base)
        return _uid_pool


def _bwrap_argv(bwrap: str, python: str, root_mode: bool, limits: SandboxLimits, box: str) -> list[str]:
    argv = [bwrap, "--die-with-parent", "--new-session"]
    if root_mode:
        # No user namespace (it could only map root to root): the bootstrap drops to an unprivileged uid, which
        # needs CAP_SETUID/CAP_SETGID until then; bwrap drops every other capability.
        argv += [
            "--unshare-pid",
            "--unshare-net",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--cap-add",
            "CAP_SETUID",
            "--cap-add",
            "CAP_SETGID",
        ]
    else:
        argv += ["--unshare-all", "--unshare-user", "--disable-userns"]
    argv += _runtime_binds(python)
    argv += [
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--perms",
        "1777",
        "--size",
        str(int(limits.tmpfs_bytes)),
        "--tmpfs",
        "/tmp",
        "--perms",
        "1777",
        "--size",
        str(int(limits.tmpfs_bytes)),
        "--tmpfs",
        "/work",
        "--ro-bind",
        box,
        "/box",
        "--hostname",
        "sandbox",
        "--chdir",
        "/work",
        "--clearenv",
    ]
    for key, value in _SANDBOX_ENV.items():
        argv += ["--setenv", key, value]
    return argv


def _resolve_bwrap() -> str | None:
    explicit = current_settings().sandbox_bwrap
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    return shutil.which("bwrap", path=os.environ.get("PATH", "") + ":/usr/bin:/bin")


_detect_cache: dict[tuple[str | None, str, bool], IsolationInfo] = {}
_detect_lock = threading.Lock()


def detect_isolation(python: str | None = None, *, refresh: bool = False) -> IsolationInfo:
    """Whether bubblewrap isolation works on this machine, found by really running a sandboxed `print`."""
    python = python or runtime_python()
    bwrap = _resolve_bwrap()
    root_mode = os.geteuid() == 0
    key = (bwrap, python, root_mode)
    with _detect_lock:
        if not refresh and key in _detect_cache:
            return _detect_cache[key]
        info = _probe(bwrap, python, root_mode)
        _detect_cache[key] = info
        return info


def _probe(bwrap: str | None, python: str, root_mode: bool) -> IsolationInfo:
    mode = "root-drop" if root_mode else "userns"
    if bwrap is None:
        return IsolationInfo(
            False,
            "none",
            "",
            "bubblewrap (bwrap) is not installed (Debian/Ubuntu: apt-get install bubblewrap)",
            None,
            python,
        )
    if not os.access(python, os.X_OK):
        return IsolationInfo(False, "none", "", f"the sandbox runtime {python} is not executable", bwrap, python)
    limits = SandboxLimits(wall_timeout_s=20.0)
    try:
        result = _run_bwrap(
            bwrap, python, root_mode, limits, "import os\nprint('sandbox-ok', os.getuid())\n", (), {}, None
        )
    except OSError as exc:
        return IsolationInfo(False, "none", "", f"bwrap failed to start: {exc}", bwrap, python)
    if result.ok and result.stdout.startswith("sandbox-ok"):
        return IsolationInfo(True, "bwrap", mode, "", bwrap, python)
    detail = (result.stderr or result.stdout).strip().splitlines()
    hint = detail[-1] if detail else f"exit code {result.returncode}"
    if "namespace" in hint.lower() or "permission" in hint.lower() or "operation not permitted" in hint.lower():
        hint += (
            " (unprivileged user namespaces are probably disabled: sysctl kernel.unprivileged_userns_clone=1"
            " / kernel.apparmor_restrict_unprivileged_userns=0, or run the worker in a container that allows"
            " them)"
        )
    return IsolationInfo(False, "none", "", f"bwrap does not work here: {hint}", bwrap, python)


def _write_box(box: Path, source: str, files: Mapping[str, str | bytes]) -> None:
    box.mkdir(mode=0o755)
    os.chmod(box, 0o755)  # readable by the unprivileged uid in root mode (mkdtemp parents are 0700: bound below)
    entries: dict[str, str | bytes] = {"main.py": source, "bootstrap.py": _BOOTSTRAP, **files}
    for name, content in entries.items():
        rel = Path(name)
        if rel.is_absolute() or ".." in rel.parts:
            raise ValueError(f"sandbox file name must be relative without '..': {name!r}")
        path = box / rel
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        os.chmod(path, 0o644)


def _read_capped(path: Path, cap: int, *, tail: bool = False) -> tuple[str, bool]:
    """At most `cap` bytes of the file: its head, or with `tail` its end (stderr: a traceback ends with its error)."""
    try:
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            if tail and size > cap:
                f.seek(size - cap)
                return f.read(cap).decode("utf-8", errors="replace"), True
            data = f.read(cap + 1)
    except FileNotFoundError:
        return "", False
    truncated = len(data) > cap
    return data[:cap].decode("utf-8", errors="replace"), truncated


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()


def _wait_exit(proc: subprocess.Popen, timeout: float) -> None:
    """proc.wait(timeout) without its polling (which adds up to 50 ms to every program): select on a pidfd."""
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is not None:
        try:
            fd = pidfd_open(proc.pid)
        except OSError:
            fd = None
        if fd is not None:
            try:
                ready, _, _ = select.select([fd], [], [], max(0.0, timeout))
            finally:
                os.close(fd)
            if not ready:
                raise subprocess.TimeoutExpired(proc.args, timeout)
    proc.wait(timeout=timeout)


def _wait(proc: subprocess.Popen, timeout: float) -> bool:
    """Wait for the process; on timeout kill its whole process group. Returns True when it timed out."""
    try:
        _wait_exit(proc, timeout)
        return False
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        proc.wait()
        return True
    finally:
        # The program cannot leave its group behind: anything still in bwrap's group dies here too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)


def _finish(
    proc_out: Path, returncode: int | None, timed_out: bool, start: float, isolation: str, limits: SandboxLimits
) -> SandboxResult:
    stdout, out_trunc = _read_capped(proc_out / "stdout", limits.max_output_bytes)
    stderr, err_trunc = _read_capped(proc_out / "stderr", limits.max_output_bytes, tail=True)
    return SandboxResult(
        returncode=None if timed_out else returncode,
        stdout=stdout,
        stderr=stderr,
        timed_out=timed_out,
        duration_s=time.monotonic() - start,
        isolation=isolation,
        stdout_truncated=out_trunc,
        stderr_truncated=err_trunc,
    )


def _run_bwrap(
    bwrap: str,
    python: str,
    root_mode: bool,
    limits: SandboxLimits,
    source: str,
    args: Sequence[str],
    files: Mapping[str, str | bytes],
    stdin: str | None,
) -> SandboxResult:
    host = Path(tempfile.mkdtemp(prefix="tp-sandbox-"))
    try:
        box, out = host / "box", host / "out"
        _write_box(box, source, files)
        out.mkdir(mode=0o700)
        with contextlib.ExitStack() as stack:
            drop_to = None
            if root_mode:
                uid = stack.enter_context(_get_uid_pool().acquire())
                drop_to = [uid, uid]
            cfg = {
                "limits": limits.rlimits(),
                "drop_to": drop_to,
                "python": python,
                "main": "/box/main.py",
                "args": list(args),
                "env": dict(_SANDBOX_ENV),
                "cwd": "/work",
            }
            argv = _bwrap_argv(bwrap, python, root_mode, limits, str(box))
            argv += [python, "-S", "-s", "/box/bootstrap.py", json.dumps(cfg)]
            stdout = stack.enter_context((out / "stdout").open("wb"))
            stderr = stack.enter_context((out / "stderr").open("wb"))
            start = time.monotonic()
            returncode, timed_out = _spawn_and_wait(
                argv, env=dict(_BWRAP_ENV), cwd=host, stdin=stdin, stdout=stdout, stderr=stderr, limits=limits
            )
        return _finish(out, returncode, timed_out, start, "bwrap", limits)
    finally:
        shutil.rmtree(host, ignore_errors=True)


def _feed_stdin(proc: subprocess.Popen[bytes], data: str) -> None:
    stdin = proc.stdin
    assert stdin is not None

    def feed() -> None:
        with contextlib.suppress(BrokenPipeError, OSError):
            stdin.write(data.encode("utf-8"))
        with contextlib.suppress(BrokenPipeError, OSError):
            stdin.close()

    threading.Thread(target=feed, daemon=True).start()


def _spawn_and_wait(
    argv: list[str], *, env: dict, cwd: Path, stdin: str | None, stdout, stderr, limits: SandboxLimits
) -> tuple[int, bool]:
    """Start the program in its own session, feed stdin, wait up to the wall-clock limit; on any error the whole
    process group is killed. Returns (returncode, timed_out)."""
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        env=env,
        cwd=str(cwd),
        start_new_session=True,
        close_fds=True,
    )
    try:
        if stdin is not None:
            _feed_stdin(proc, stdin)
        timed_out = _wait(proc, limits.wall_timeout_s)
    except BaseException:
        _kill_group(proc)
        proc.wait()
        raise
    return proc.returncode, timed_out


def _run_unsandboxed(
    python: str,
    limits: SandboxLimits,
    source: str,
    args: Sequence[str],
    files: Mapping[str, str | bytes],
    stdin: str | None,
) -> SandboxResult:
    host = Path(tempfile.mkdtemp(prefix="tp-unsandboxed-"))
    try:
        box, out, work = host / "box", host / "out", host / "work"
        _write_box(box, source, files)
        out.mkdir(mode=0o700)
        work.mkdir(mode=0o700)
        env = {**_SANDBOX_ENV, "HOME": str(work), "TMPDIR": str(work)}
        cfg = {
            "limits": limits.rlimits(),
            "drop_to": None,
            "python": python,
            "main": str(box / "main.py"),
            "args": list(args),
            "env": env,
            "cwd": str(work),
        }
        with (out / "stdout").open("wb") as stdout, (out / "stderr").open("wb") as stderr:
            start = time.monotonic()
            returncode, timed_out = _spawn_and_wait(
                [python, "-S", "-s", str(box / "bootstrap.py"), json.dumps(cfg)],
                env=env,
                cwd=work,
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
                limits=limits,
            )
        return _finish(out, returncode, timed_out, start, "none", limits)
    finally:
        shutil.rmtree(host, ignore_errors=True)


@dataclass
class Sandbox:
    """Runs untrusted Python source. Thread-safe: one instance can serve a pool of threads.

    `allow_unsandboxed`: None reads `TP_SANDBOX_ALLOW_UNSAFE`; False/None without that variable -> fail closed
    (`SandboxUnavailable`) when bubblewrap isolation does not work here.
    """

    limits: SandboxLimits = field(default_factory=SandboxLimits)
    allow_unsandboxed: bool | None = None
    python: str | None = None

    def __post_init__(self) -> None:
        self.python = self.python or runtime_python()
        if self.allow_unsandboxed is None:
            self.allow_unsandboxed = _allow_unsafe_env()
        self.info = detect_isolation(self.python)
        if not self.info.available and not self.allow_unsandboxed:
            raise SandboxUnavailable(
                f"refusing to run untrusted code: {self.info.reason}. Install/enable bubblewrap, or accept the "
                f"risk explicitly with allow_unsandboxed=True / {ENV_ALLOW_UNSAFE}=1 (the code then runs with "
                f"rlimits only and can read the host's files and use its network)."
            )

    @property
    def isolation(self) -> str:
        return self.info.mechanism if self.info.available else "none"

    def run_python(
        self,
        source: str,
        *,
        args: Sequence[str] = (),
        files: Mapping[str, str | bytes] | None = None,
        stdin: str | None = None,
        limits: SandboxLimits | None = None,
        timeout: float | None = None,
    ) -> SandboxResult:
        limits = limits or self.limits
        if timeout is not None:
            limits = replace(limits, wall_timeout_s=float(timeout))
        files = dict(files or {})
        assert self.python is not None, "no Python interpreter for the sandbox"
        if self.info.available:
            assert self.info.bwrap is not None
            return _run_bwrap(
                self.info.bwrap, self.python, self.info.mode == "root-drop", limits, source, args, files, stdin
            )
        return _run_unsandboxed(self.python, limits, source, args, files, stdin)

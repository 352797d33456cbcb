"""The code sandbox: a battery of hostile programs, each contained, the host unaffected; and fail-closed behaviour.

Every hostile program runs ONLY through a sandbox with working bubblewrap isolation (never unsandboxed: `kill(-1)`
as root without a PID namespace would take the host down). Without bubblewrap these tests fail with instructions
(apt-get install bubblewrap); set TP_SKIP_SANDBOX_TESTS=1 to skip them instead.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from pathlib import Path

import psutil
import pytest

import training_platform
from training_platform.evaluation import sandbox as sandbox_mod
from training_platform.evaluation.sandbox import (
    Sandbox,
    SandboxLimits,
    SandboxUnavailable,
    detect_isolation,
)

pytestmark = pytest.mark.integration

REPO = Path(training_platform.__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def isolation(sandbox_ok):
    return detect_isolation(refresh=True)


@pytest.fixture
def box(isolation, monkeypatch):
    monkeypatch.delenv(sandbox_mod.ENV_ALLOW_UNSAFE, raising=False)
    limits = SandboxLimits(wall_timeout_s=20.0, cpu_seconds=5, memory_bytes=256 << 20, max_processes=16)
    sandbox = Sandbox(limits=limits, allow_unsandboxed=False)
    assert sandbox.isolation == "bwrap"
    return sandbox


def _sandbox_tmpdirs() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("tp-sandbox-*")}


def _sandbox_uid_range() -> range:
    base = int(os.environ.get(sandbox_mod.ENV_UID_BASE, sandbox_mod._DEFAULT_UID_BASE))
    return range(base, base + sandbox_mod._UID_SLOTS)


def _leftovers(marker: str) -> list[str]:
    """Processes that belong to a sandboxed program: its marker in the command line, or a sandbox uid (root)."""
    uids = _sandbox_uid_range() if os.geteuid() == 0 else range(0)
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "uids", "name"]):
        try:
            cmdline = " ".join(proc.info["cmdline"] or [])
            real_uid = proc.info["uids"].real if proc.info["uids"] else -1
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if marker in cmdline or real_uid in uids:
            found.append(f"{proc.info['pid']} uid={real_uid} {cmdline[:80]}")
    return found


def _assert_no_leftovers(marker: str) -> None:
    deadline = time.monotonic() + 5
    while (left := _leftovers(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)  # the kernel tears the PID namespace down asynchronously
    assert not left, f"processes survived the sandbox: {left}"


def _run(box: Sandbox, source: str, *args: str, **kwargs):
    marker = f"tp-hostile-{uuid.uuid4().hex}"
    before = _sandbox_tmpdirs()
    result = box.run_python(source, args=[marker, *args], **kwargs)
    _assert_no_leftovers(marker)
    assert _sandbox_tmpdirs() <= before, "the sandbox left its temp dir behind"
    return result


def _host_still_works() -> None:
    assert subprocess.run(["true"], timeout=30).returncode == 0  # the host can still start processes


# --- the battery --------------------------------------------------------------------------------------------------


READ_FILES = r"""
import json, os, sys
out = {}
for target in sys.argv[2:]:
    try:
        with open(target, "rb") as f:
            out[target] = "READ:" + f.read(200).decode("latin-1")
    except Exception as e:
        out[target] = type(e).__name__
out["/"] = sorted(os.listdir("/"))
out["uid"] = [os.getuid(), os.geteuid()]
status = open("/proc/self/status").read()
out["caps"] = {line.split(":")[0]: line.split()[1] for line in status.splitlines()
               if line.startswith(("CapInh", "CapPrm", "CapEff", "CapAmb", "NoNewPrivs"))}
out["repo_visible"] = os.path.exists(sys.argv[-1])
print(json.dumps(out))
"""


def test_cannot_read_files_outside_its_dir(box, tmp_path):
    secret = f"TOP-SECRET-{uuid.uuid4().hex}"
    secret_file = tmp_path / "secret.txt"
    secret_file.write_text(secret)
    targets = [
        str(secret_file),
        "/etc/passwd",
        "/etc/shadow",
        "/etc/hostname",
        str(REPO / "pyproject.toml"),
        os.path.expanduser("~/.bashrc"),
        str(Path(sys.executable).parent / "activate"),
        str(REPO),
    ]
    result = _run(box, READ_FILES, *targets)
    assert result.ok, result.stderr
    out = json.loads(result.stdout)
    for target in targets[:-1]:
        assert not str(out[target]).startswith("READ:"), f"the sandbox read {target}"
    assert secret not in result.stdout
    assert out["repo_visible"] is False
    assert not {"etc", "home", "var", "opt", "srv", "mnt"} & set(out["/"])  # no host file system, only the runtime
    assert 0 not in out["uid"]  # never root inside
    caps = out["caps"]
    assert int(caps["CapEff"], 16) == int(caps["CapPrm"], 16) == int(caps["CapAmb"], 16) == 0  # no capabilities
    assert caps["NoNewPrivs"] == "1"


WRITE_FILES = r"""
import json, os, sys
out = {}
for target in sys.argv[2:]:
    try:
        with open(target, "w") as f:
            f.write("pwned")
        out[target] = "WROTE"
    except Exception as e:
        out[target] = type(e).__name__
with open("scratch.txt", "w") as f:  # its own private work dir is writable
    f.write("fine")
with open("/tmp/scratch.txt", "w") as f:
    f.write("fine")
out["cwd"] = os.getcwd()
print(json.dumps(out))
"""


def test_cannot_write_outside_its_dir(box, tmp_path):
    host_file = tmp_path / "pwned.txt"
    host_tmp = Path(tempfile.gettempdir()) / f"tp-pwned-{uuid.uuid4().hex}"
    repo_file = REPO / f"pwned-{uuid.uuid4().hex}.txt"
    runtime_file = Path(sys.base_prefix) / "pwned.txt"
    targets = [str(host_file), str(host_tmp), str(repo_file), "/usr/pwned.txt", str(runtime_file)]
    result = _run(box, WRITE_FILES, *targets)
    assert result.ok, result.stderr
    out = json.loads(result.stdout)
    assert out["cwd"] == "/work"
    for target in targets:
        assert not Path(target).exists(), f"the sandbox wrote {target} on the host"
    assert out["/usr/pwned.txt"] in ("OSError", "PermissionError")  # read-only runtime
    # Private dirs: a second program does not see the first one's files.
    again = _run(box, "import os; print(os.path.exists('scratch.txt'), os.path.exists('/tmp/scratch.txt'))")
    assert again.stdout.split() == ["False", "False"]


NETWORK = r"""
import json, socket, sys
port = int(sys.argv[2])
out = {}
def attempt(name, fn):
    try:
        fn()
        out[name] = "OK"
    except Exception as e:
        out[name] = type(e).__name__
attempt("host_loopback", lambda: socket.create_connection(("127.0.0.1", port), timeout=2))
attempt("internet_tcp", lambda: socket.create_connection(("1.1.1.1", 53), timeout=2))
attempt("dns", lambda: socket.getaddrinfo("pypi.org", 443))
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(b"x", ("8.8.8.8", 53))
attempt("udp", udp)
print(json.dumps(out))
"""


def test_has_no_network(box):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.5)
    try:
        result = _run(box, NETWORK, str(listener.getsockname()[1]))
        assert result.ok, result.stderr
        out = json.loads(result.stdout)
        assert all(value != "OK" for value in out.values()), out
        with pytest.raises(TimeoutError):
            listener.accept()  # nothing ever connected to the host's loopback
    finally:
        listener.close()


FORK_BOMB = r"""
import os, time
while True:
    try:
        os.fork()
    except OSError:
        time.sleep(0.01)
"""


def test_fork_bomb_is_contained(box):
    limits = SandboxLimits(wall_timeout_s=3.0, cpu_seconds=5, memory_bytes=256 << 20, max_processes=16)
    start = time.monotonic()
    result = _run(box, FORK_BOMB, limits=limits)
    assert not result.ok
    assert time.monotonic() - start < 3.0 + 15
    _host_still_works()


SHELL_FORK_BOMB = r"""
import os
os.execv("/bin/sh", ["sh", "-c", "bomb() { bomb | bomb & }; bomb; sleep 60"])
"""


def test_shell_fork_bomb_is_contained(box):
    limits = SandboxLimits(wall_timeout_s=3.0, cpu_seconds=5, memory_bytes=256 << 20, max_processes=16)
    result = _run(box, SHELL_FORK_BOMB, limits=limits)
    # Either the wall clock killed the whole PID namespace, or the shell itself could no longer fork its `sleep`.
    assert not result.ok
    assert "Cannot fork" in result.stderr  # RLIMIT_NPROC held the bomb back
    _host_still_works()


MEMORY_BOMB = r"""
import sys
chunks = []
try:
    while True:
        chunks.append(bytearray(32 << 20))
except MemoryError:
    print("MemoryError after", len(chunks) * 32, "MiB", flush=True)
    sys.exit(3)
"""


def test_memory_bomb_is_contained(box):
    host_rss = psutil.Process().memory_info().rss
    result = _run(box, MEMORY_BOMB)
    assert result.returncode == 3, (result.stdout, result.stderr)
    allocated = int(result.stdout.split()[2])
    assert allocated <= 256  # RLIMIT_AS = 256 MiB stopped it
    assert psutil.Process().memory_info().rss < host_rss + (64 << 20)


def test_infinite_loop_is_killed_by_the_cpu_limit(box):
    limits = SandboxLimits(wall_timeout_s=30.0, cpu_seconds=1, memory_bytes=256 << 20)
    result = _run(box, "while True:\n    pass\n", limits=limits)
    assert not result.ok
    assert result.timed_out or result.returncode == 128 + 24  # SIGXCPU


def test_sleeper_is_killed_by_the_wall_clock(box):
    limits = SandboxLimits(wall_timeout_s=1.5, cpu_seconds=5, memory_bytes=256 << 20)
    start = time.monotonic()
    result = _run(box, "import time\ntime.sleep(600)\n", limits=limits)
    assert result.timed_out and result.returncode is None
    assert time.monotonic() - start < 1.5 + 10


DAEMON = r"""
import os, time
if os.fork() == 0:
    os.setsid()  # leave the process group, like a daemon
    if os.fork() == 0:
        time.sleep(600)
    os._exit(0)
print("parent done", flush=True)
"""


def test_background_daemon_dies_with_the_program(box):
    result = _run(box, DAEMON)  # _run asserts that no process of the program survived
    assert result.ok and "parent done" in result.stdout


ENVIRONMENT = r"""
import glob, json, os
procs = {}
for path in glob.glob("/proc/[0-9]*/environ"):
    try:
        with open(path, "rb") as f:
            procs[path] = f.read().decode("latin-1")
    except Exception as e:
        procs[path] = type(e).__name__
print(json.dumps({"env": dict(os.environ), "procs": procs}))
"""


def test_cannot_read_env_secrets(box, monkeypatch):
    secret = f"sk-{uuid.uuid4().hex}"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.setenv("HF_TOKEN", secret)
    monkeypatch.setenv("TP_TEST_SECRET", secret)
    result = _run(box, ENVIRONMENT)
    assert result.ok, result.stderr
    assert secret not in result.stdout
    env = json.loads(result.stdout)["env"]
    assert set(env) <= {
        "PATH",
        "HOME",
        "TMPDIR",
        "LANG",
        "LC_ALL",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONHASHSEED",
        "PYTHONIOENCODING",
    }


KILLER = r"""
import json, os, signal, sys
out = {}
for name, target in (("parent", os.getppid()), ("init", 1), ("host_pid", int(sys.argv[2])),
                     ("host_canary", int(sys.argv[3])), ("everyone", -1)):
    try:
        os.kill(target, signal.SIGKILL)
        out[name] = "sent"
    except Exception as e:
        out[name] = type(e).__name__
print(json.dumps(out), flush=True)
"""


def test_cannot_kill_its_parent_or_host_processes(box):
    canary = subprocess.Popen(["sleep", "60"])
    try:
        result = _run(box, KILLER, str(os.getpid()), str(canary.pid))
        assert canary.poll() is None, "a host process was killed from inside the sandbox"
        assert psutil.pid_exists(os.getpid())  # this test process (the sandbox's parent) is alive
        out = json.loads(result.stdout)
        assert out["host_pid"] == "ProcessLookupError" and out["host_canary"] == "ProcessLookupError"
    finally:
        canary.kill()
        canary.wait()
    _host_still_works()


def test_big_output_is_capped(box):
    limits = SandboxLimits(wall_timeout_s=20.0, max_output_bytes=1000, file_size_bytes=1 << 20)
    result = _run(box, "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n", limits=limits)
    assert not result.ok  # RLIMIT_FSIZE stops it (SIGXFSZ) long before the disk fills
    assert len(result.stdout) == 1000 and result.stdout_truncated
    noisy = _run(box, "import sys\nsys.stderr.write('noise ' * 1000)\nraise ValueError('the end')\n", limits=limits)
    assert noisy.stderr_truncated and len(noisy.stderr) == 1000
    assert noisy.stderr.endswith("ValueError: the end\n"), "stderr keeps its end: the traceback's error"


def test_battery_leaves_no_sandbox_processes_at_all():
    """Run last in this module: nothing of any program above is still running."""
    _assert_no_leftovers(f"tp-hostile-{uuid.uuid4().hex}")


# --- without root: the user-namespace mode ------------------------------------------------------------------------

USERNS_SCRIPT = r"""
import json, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from training_platform.evaluation.sandbox import Sandbox, SandboxLimits, detect_isolation
info = detect_isolation()
box = Sandbox(limits=SandboxLimits(wall_timeout_s=2, max_processes=8, memory_bytes=256 << 20),
              allow_unsandboxed=False)
bomb = box.run_python("import os, time\nwhile True:\n    try:\n        os.fork()\n"
                      "    except OSError:\n        time.sleep(0.01)\n")
probe = box.run_python("import os, socket\nprint(os.getuid(), os.path.exists('/etc/passwd'))\n"
                       "try:\n    socket.create_connection(('1.1.1.1', 53), timeout=2)\n    print('net')\n"
                       "except OSError:\n    print('nonet')\n")
print(json.dumps({"mode": info.mode, "bomb_ok": bomb.ok, "probe": probe.stdout.split()}))
"""


def _world_readable(path: Path) -> bool:
    return all(p.stat().st_mode & 0o005 == 0o005 for p in [path, *path.parents])


@pytest.mark.skipif(
    os.geteuid() != 0
    or not shutil.which("setpriv")
    or not Path("/usr/bin/python3").exists()
    or not _world_readable(REPO),
    reason="needs root (to switch to an unprivileged user), setpriv, /usr/bin/python3 and a repo "
    "that other users can read",
)
def test_unprivileged_user_gets_the_user_namespace_sandbox(isolation):
    proc = subprocess.run(
        [
            "setpriv",
            "--reuid",
            "65534",
            "--regid",
            "65534",
            "--clear-groups",
            "/usr/bin/python3",  # a runtime the unprivileged user can run (the venv's base may be in /root)
            "-c",
            USERNS_SCRIPT,
            str(REPO),
            sysconfig.get_paths()["purelib"],  # the venv's packages: settings are read through pydantic-settings
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin"},
        cwd="/",
    )
    if "bwrap does not work here" in proc.stderr and "namespace" in proc.stderr:
        pytest.skip(f"unprivileged user namespaces are disabled here: {proc.stderr[-300:]}")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["mode"] == "userns"
    assert out["bomb_ok"] is False
    assert out["probe"] == ["65534", "False", "nonet"]


# --- fail closed ----------------------------------------------------------------------------------------------------


def test_fails_closed_without_isolation(monkeypatch, tmp_path):
    monkeypatch.setenv(sandbox_mod.ENV_BWRAP, str(tmp_path / "no-bwrap"))
    monkeypatch.delenv(sandbox_mod.ENV_ALLOW_UNSAFE, raising=False)
    try:
        info = detect_isolation(refresh=True)
        assert not info.available and "not installed" in info.reason
        with pytest.raises(SandboxUnavailable, match="refusing to run untrusted code"):
            Sandbox()
        with pytest.raises(SandboxUnavailable):
            Sandbox(allow_unsandboxed=False)
        # The operator can explicitly accept the risk (a harmless program only!).
        unsafe = Sandbox(allow_unsandboxed=True)
        assert unsafe.isolation == "none"
        result = unsafe.run_python("import os\nprint(os.environ.get('OPENAI_API_KEY'), os.getcwd())\n")
        assert result.ok and result.isolation == "none"
        assert result.stdout.split()[0] == "None"  # minimal environment even then
        monkeypatch.setenv(sandbox_mod.ENV_ALLOW_UNSAFE, "1")
        assert Sandbox().isolation == "none"
    finally:
        monkeypatch.delenv(sandbox_mod.ENV_BWRAP)
        detect_isolation(refresh=True)


def test_unsandboxed_mode_still_kills_on_timeout(monkeypatch, tmp_path):
    monkeypatch.setenv(sandbox_mod.ENV_BWRAP, str(tmp_path / "no-bwrap"))
    try:
        detect_isolation(refresh=True)
        unsafe = Sandbox(limits=SandboxLimits(wall_timeout_s=1.0), allow_unsandboxed=True)
        marker = f"tp-hostile-{uuid.uuid4().hex}"
        result = unsafe.run_python("import time\ntime.sleep(600)\n", args=[marker])
        assert result.timed_out
        _assert_no_leftovers(marker)
    finally:
        monkeypatch.delenv(sandbox_mod.ENV_BWRAP)
        detect_isolation(refresh=True)

"""`python`: run the model's code in the evaluation sandbox (evaluation/sandbox.py) and give back what it printed.

Each call is one bubblewrap sandbox with the sandbox's limits (no network, no host files outside its own dir, CPU,
memory, processes, file sizes), its wall clock set to the call's `timeout_s` (on timeout the whole process group is
killed) and its CPU limit to the same number of seconds. The result is stdout then stderr, cut to
`max_output_chars` (the head of stdout and the tail of stderr, where a traceback's exception line is), then a line
with the exit status when it is not 0 (`ok` means exit 0 within the time). Fails closed like the sandbox: where
bubblewrap does not work and the operator did not set TP_SANDBOX_ALLOW_UNSAFE, every call is an error saying so (the
job's preflight refuses such a job before it starts). At most one sandbox per CPU core runs at once in a process; a
call waits for a free one no longer than its timeout.
"""

from __future__ import annotations

import math
import os
import threading
from dataclasses import replace
from typing import TYPE_CHECKING

from pydantic import Field

from training_platform.training.tools import ToolArgs, ToolParams, ToolResult, ToolRun, register_tool

if TYPE_CHECKING:
    from training_platform.evaluation.sandbox import Sandbox

MAX_CODE_CHARS = 16_000

_SLOTS = threading.BoundedSemaphore(max(1, os.cpu_count() or 1))
_sandbox: Sandbox | None = None
_sandbox_lock = threading.Lock()


class PythonArgs(ToolArgs):
    code: str = Field(
        min_length=1,
        max_length=MAX_CODE_CHARS,
        description="A Python program (standard library only, no network, no files but its own); what it prints "
        "is the result",
    )


class PythonParams(ToolParams):
    memory_mb: int = Field(512, ge=64, le=4096, description="Address-space limit of each process of the program.")
    max_output_chars: int = Field(
        2000, ge=64, le=64 * 1024, description="stdout + stderr are cut to this many characters."
    )

    def preflight(self, *, on_worker: bool) -> list[tuple[str, str]]:
        """The sandbox works on this machine, or the operator accepted running code unisolated (fails closed)."""
        if not on_worker:
            return []
        from training_platform.core.settings import current_settings
        from training_platform.evaluation.sandbox import ENV_ALLOW_UNSAFE, detect_isolation

        info = detect_isolation()
        if info.available or current_settings().sandbox_allow_unsafe:
            return []
        return [
            (
                "",
                f"python runs the model's code in the bubblewrap sandbox, which does not work here ({info.reason}): "
                f"install bubblewrap, or accept running it unisolated with {ENV_ALLOW_UNSAFE}=1",
            )
        ]


def sandbox() -> Sandbox:
    """The process's sandbox (thread-safe; SandboxUnavailable when isolation does not work here and unsafe runs were
    not allowed)."""
    global _sandbox
    with _sandbox_lock:
        if _sandbox is None:
            from training_platform.evaluation.sandbox import Sandbox

            _sandbox = Sandbox()
        return _sandbox


@register_tool(
    "python",
    PythonArgs,
    PythonParams,
    "Run a Python program in a sandbox and return what it printed.",
)
def build_python(params: PythonParams) -> ToolRun:
    limit = params.max_output_chars

    def run(args: PythonArgs, *, timeout_s: float) -> ToolResult:
        box = sandbox()
        if not _SLOTS.acquire(timeout=timeout_s):
            return ToolResult(f"error: no sandbox was free within {timeout_s:g}s", False)
        try:
            limits = replace(
                box.limits,
                wall_timeout_s=float(timeout_s),
                cpu_seconds=max(1, math.ceil(timeout_s)),
                memory_bytes=params.memory_mb << 20,
                max_output_bytes=params.max_output_chars * 4,  # UTF-8: at most 4 bytes a character
            )
            result = box.run_python(args.code, limits=limits)
        finally:
            _SLOTS.release()
        notes = []
        if result.stdout_truncated or result.stderr_truncated or len(result.stdout + result.stderr) > limit:
            notes.append("[output truncated]")
        if result.timed_out:
            notes.append(f"[killed: it ran past {timeout_s:g}s]")
        elif result.returncode != 0:
            notes.append(f"[exit status {result.returncode}]")
        output = _cut(result.stdout, result.stderr, limit)
        if notes and output and not output.endswith("\n"):
            output += "\n"
        return ToolResult(output + "\n".join(notes), result.ok)

    return run


def _cut(stdout: str, stderr: str, limit: int) -> str:
    """stdout + stderr in at most `limit` characters. When cut, stdout keeps its head and stderr its tail (a
    traceback's last line says what went wrong); each gets at least half the budget when the other needs it."""
    if len(stdout) + len(stderr) <= limit:
        return stdout + stderr
    head = stdout[: max(limit - len(stderr), limit // 2)]
    kept = min(len(stderr), limit - len(head))
    return head + stderr[len(stderr) - kept :]

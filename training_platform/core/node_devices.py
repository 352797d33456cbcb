"""The devices this machine offers training jobs: TP_NODE_DEVICES (`cuda=8,cpu=16`) or what it detects.

cuda: the GPUs the NVIDIA driver lists (/proc/driver/nvidia/gpus), narrowed by CUDA_VISIBLE_DEVICES; read without
importing torch, so the API and a worker's claim stay light. cpu: processes of CPU jobs (each a gloo rank), the
cores this process may use, at least 2 (a CPU rank can share a core; one core must still run a 2-process job).
mps is never detected (one Apple GPU, one process): name it in TP_NODE_DEVICES.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from training_platform.core.errors import InvalidInput

DEVICE_TYPES = ("cuda", "mps", "cpu")
MAX_DEVICES_PER_TYPE = 100_000


def parse_devices(text: str, *, name: str = "TP_NODE_DEVICES") -> dict[str, int]:
    """`cuda=8,cpu=16` -> {"cuda": 8, "cpu": 16}; a malformed entry is the operator's error, named."""
    devices: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        if not sep or key not in DEVICE_TYPES:
            raise InvalidInput([(name, f"{part!r}: expected <device>=<count> with device one of {DEVICE_TYPES}")])
        try:
            count = int(value.strip())
        except ValueError:
            raise InvalidInput([(name, f"{part!r}: the count must be an integer")]) from None
        if not 0 <= count <= MAX_DEVICES_PER_TYPE:
            raise InvalidInput([(name, f"{part!r}: the count must be between 0 and {MAX_DEVICES_PER_TYPE}")])
        devices[key] = count
    return devices


def _cuda_count() -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    try:
        listed = sum(1 for _ in Path("/proc/driver/nvidia/gpus").iterdir())
    except OSError:
        listed = 0
    if visible is not None and listed:
        entries = [v for v in visible.split(",") if v.strip() and v.strip() != "-1"]
        return min(listed, len(entries))
    return listed


def _cpu_count() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(2, cores)


def node_devices(configured: str = "") -> dict[str, int]:
    """This node's devices: TP_NODE_DEVICES when set (types it leaves out have none), else detected."""
    if configured.strip():
        return {t: n for t, n in parse_devices(configured).items() if n > 0}
    detected = {"cuda": _cuda_count(), "cpu": _cpu_count()}
    return {t: n for t, n in detected.items() if n > 0}


def node_pool_name(hostname: str | None = None) -> str:
    return f"node:{hostname or socket.gethostname()}"

"""verl/utils/distributed.py, `initialize_global_process_group_ray`:

    backend = backend or f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"

On the CPU platform that is "cpu:gloo,cpu:gloo" and torch refuses it ("Duplicate device type cpu"); its actor and
critic workers call it first thing (workers/engine_workers.py:89). The patched function uses plain "gloo" there and
changes nothing on accelerators."""

from __future__ import annotations

import functools
import inspect

REPLACED = 'backend = backend or f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"'
_applied = False


def needed() -> bool:
    from verl.utils import distributed

    return REPLACED in inspect.getsource(distributed.initialize_global_process_group_ray)


def cpu_backend(backend: str | None) -> str | None:
    """The backend to hand verl's function: gloo alone when verl would name the CPU twice."""
    from verl.utils.device import get_device_name

    if backend is None and get_device_name() == "cpu":
        return "gloo"
    return backend


def apply() -> None:
    global _applied
    if _applied:
        return
    import sys

    from verl.utils import distributed

    if not needed():
        raise RuntimeError(f"verl changed initialize_global_process_group_ray: the patch of {REPLACED!r} is stale")
    original = distributed.initialize_global_process_group_ray

    @functools.wraps(original)
    def initialize_global_process_group_ray(timeout_second=None, backend=None):
        return original(timeout_second=timeout_second, backend=cpu_backend(backend))

    setattr(distributed, "initialize_global_process_group_ray", initialize_global_process_group_ray)  # noqa: B010 - verl's module, patched
    for name in ("verl.workers.engine_workers", "verl.checkpoint_engine.base"):  # modules that bound it by name
        module = sys.modules.get(name)
        if module is not None and getattr(module, "initialize_global_process_group_ray", None) is original:
            setattr(module, "initialize_global_process_group_ray", initialize_global_process_group_ray)  # noqa: B010
    _applied = True

"""verl/workers/engine/fsdp/transformer_impl.py, `FSDPEngine._build_fsdp_module` (FSDP2), for forward-only models
(the reference policy) and `offload_policy`:

    offload_policy = CPUOffloadPolicy(pin_memory=True)

Pinned memory needs an accelerator ("Cannot access accelerator device when none is available"): with a reference
model (a KL term) verl's RL cannot start on the CPU. The patched module's `CPUOffloadPolicy` pins nothing; the
parameters already live in CPU memory. Installed on the CPU platform only."""

from __future__ import annotations

import functools
import inspect

REPLACED = "offload_policy = CPUOffloadPolicy(pin_memory=True)"
_applied = False


def needed() -> bool:
    from verl.workers.engine.fsdp import transformer_impl

    return REPLACED in inspect.getsource(transformer_impl.FSDPEngine._build_fsdp_module)


def apply() -> None:
    global _applied
    if _applied:
        return
    from verl.workers.engine.fsdp import transformer_impl

    if not needed():
        raise RuntimeError(f"verl changed FSDPEngine._build_fsdp_module: the patch of {REPLACED!r} is stale")
    original = transformer_impl.CPUOffloadPolicy

    @functools.wraps(original)
    def cpu_offload_policy(*args, **kwargs):
        return original(*args, **{**kwargs, "pin_memory": False})

    setattr(transformer_impl, "CPUOffloadPolicy", cpu_offload_policy)  # noqa: B010 - verl's module, patched
    _applied = True

"""verl on CPU: a `cpu` platform registered through verl's own PlatformRegistry (with a torch.cuda-like device
module that does nothing where CUDA would manage memory or streams), the CPU device added to verl's EngineRegistry
for its FSDP engines, gloo for its process groups, and Ray CPUs as the resource verl's worker bundles ask for.
verl's SFT trainer then runs with FSDP2 on CPU processes (sdpa attention and fp32 come from the mapping); its RL
too, with the `hf` rollout and the patches plugin.py adds, on a private Ray or any Ray cluster's CPU nodes.

`install()` must run before verl first asks for its platform (it caches it per process).
"""

from __future__ import annotations

import contextlib
import os
from types import SimpleNamespace
from typing import Any

_installed = False


def _device_module() -> Any:
    """What verl calls on `get_torch_device()` (torch.cuda's names), for CPU."""
    import torch

    def nothing(*args: Any, **kwargs: Any) -> None:
        return None

    class _Stream:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def synchronize(self) -> None:
            pass

        def wait_stream(self, other: Any) -> None:
            pass

    def mem_get_info(*args: Any) -> tuple[int, int]:
        import psutil

        memory = psutil.virtual_memory()
        return memory.available, memory.total

    return SimpleNamespace(
        is_available=lambda: True,
        device_count=lambda: 1,
        current_device=lambda: "cpu",
        set_device=nothing,
        synchronize=nothing,
        empty_cache=nothing,
        ipc_collect=nothing,
        set_per_process_memory_fraction=nothing,
        get_device_name=lambda *a: "cpu",
        get_rng_state=lambda *a: torch.get_rng_state(),
        set_rng_state=lambda state, *a: torch.set_rng_state(state),
        manual_seed=torch.manual_seed,
        manual_seed_all=torch.manual_seed,
        memory_allocated=lambda *a: 0,
        memory_reserved=lambda *a: 0,
        max_memory_allocated=lambda *a: 0,
        max_memory_reserved=lambda *a: 0,
        mem_get_info=mem_get_info,
        current_stream=lambda *a: _Stream(),
        stream=lambda *a: contextlib.nullcontext(),
        Stream=_Stream,
        Event=_Stream,
    )


def install() -> None:
    """Register the CPU platform and engines with verl (idempotent)."""
    global _installed
    if _installed:
        return
    import torch
    from verl.plugin.platform import platform_manager
    from verl.plugin.platform.platform_base import PlatformBase

    module = _device_module()

    @platform_manager.PlatformRegistry.register(platform="cpu")
    class PlatformCPU(PlatformBase):
        device_name = "cpu"
        vendor_name = "cpu"
        device_module = module

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check: bool = False) -> bool:
            return True

        def current_device(self) -> Any:  # verl passes it to .to(device=...): the CPU, not an accelerator index
            return "cpu"

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            return None

        def synchronize(self, device_index: int | None = None) -> None:
            return None

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            return None

        def empty_cache(self) -> None:
            return None

        def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"

        @contextlib.contextmanager
        def nvtx_range(self, msg: str):
            yield

        def profiler_start(self) -> None:
            return None

        def profiler_stop(self) -> None:
            return None

        def ray_resource_name(self) -> str:
            # A worker's placement bundle is then {"CPU": 1} (verl's pool adds its accelerator to a CPU bundle): the
            # CPUs of any Ray, a plain `ray start` cluster's included; never logical GPUs, which a shared cluster's
            # other jobs and our scheduler would read as real ones. verl's own check counts GPUs: patches/
            # resource_check.py counts this resource. This platform is only installed without CUDA.
            return "CPU"

        def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
            # verl asks for 1 / max_colocate_count of a bundle's accelerator per colocated worker: here of its CPU
            return {"num_cpus": num_gpus}

        def ray_noset_envvars(self) -> list[str]:
            return []

        def is_ipc_supported(self) -> bool:
            return False

        def cudart(self) -> Any:
            return None

    os.environ["VERL_PLATFORM"] = "cpu"
    platform_manager._current_platform = None  # resolved again, now to cpu

    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp import transformer_impl

    for model_type, cls_name in (
        ("language_model", "FSDPEngineWithLMHead"),
        ("value_model", "FSDPEngineWithValueHead"),
    ):
        engine_cls = getattr(transformer_impl, cls_name, None)
        if engine_cls is None:
            continue
        for backend in ("fsdp", "fsdp2"):
            EngineRegistry._engines.setdefault(model_type, {}).setdefault(backend, {}).setdefault("cpu", engine_cls)
    _installed = True

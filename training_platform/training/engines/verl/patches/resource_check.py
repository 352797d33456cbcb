"""verl/single_controller/ray/base.py, `ResourcePoolManager._check_resource_available`:

    node: node_info.get("GPU", 0) if "GPU" in node_info else node_info.get("NPU", 0)

verl counts a cluster's GPUs (or NPUs) before it places its workers, whatever resource its platform asks for. On the
CPU platform the workers' bundles ask for Ray CPUs (cpu.py `ray_resource_name`), so on a CPU cluster the check
would refuse every run ("Total available GPUs 0 ..."). The patched check is verl's, counting the platform's
resource; on accelerators that is GPU or NPU as before."""

from __future__ import annotations

import inspect

REPLACED = 'node: node_info.get("GPU", 0) if "GPU" in node_info else node_info.get("NPU", 0)'
_applied = False


def needed() -> bool:
    from verl.single_controller.ray.base import ResourcePoolManager

    return REPLACED in inspect.getsource(ResourcePoolManager._check_resource_available)


def check_resource_available(self) -> None:
    """The total of the platform's resource (Ray CPUs on the CPU platform) covers every pool's processes."""
    import ray
    from verl.utils.device import get_resource_name

    resource = get_resource_name()
    per_node = ray._private.state.available_resources_per_node()
    available = sum(info.get(resource, 0) for info in per_node.values())
    required = sum(count for nodes in self.resource_pool_spec.values() for count in nodes)
    if available < required:
        raise ValueError(
            f"the Ray cluster has {available:g} {resource}s available; verl's worker pools need {required} "
            f"({dict(self.resource_pool_spec)})"
        )


def apply() -> None:
    global _applied
    if _applied:
        return
    from verl.single_controller.ray.base import ResourcePoolManager

    if not needed():
        raise RuntimeError(
            f"verl changed ResourcePoolManager._check_resource_available: the patch of {REPLACED!r} is stale"
        )
    setattr(ResourcePoolManager, "_check_resource_available", check_resource_available)  # noqa: B010 - verl's class, patched
    _applied = True

"""verl/single_controller/ray/base.py, `RayResourcePool.get_placement_groups`:

    placement_group(bundles=bundles, strategy=strategy, name=pg_name_prefix + str(idx), lifetime=lifetime)

verl makes one STRICT_PACK placement group per node of a pool (`n_gpus_per_node` bundles each) and trusts that a
node's GPUs are all taken by one group, so the next lands on another node. CPU nodes have more CPUs than a job's
`num_devices`: two groups of a 2-node job fit on one 2-CPU node, and Ray put them there (seen on the test cluster
at a resume). The patched call pins each group of a pool to a node of its own (a `ray.io/node-id` bundle label
selector), the node with the most free CPUs the pool has not used yet; when no unused node can hold it, Ray places
it as verl asked. Installed on the CPU platform only (GPU pools keep verl's own placement)."""

from __future__ import annotations

import inspect
from typing import Any

REPLACED = "placement_group(bundles=bundles, strategy=strategy, name=pg_name_prefix + str(idx), lifetime=lifetime)"
NODE_LABEL = "ray.io/node-id"
_applied = False
_used: dict[str, set[str]] = {}  # a pool's group name prefix -> the nodes its groups were pinned to


def needed() -> bool:
    from verl.single_controller.ray.base import RayResourcePool

    return REPLACED in inspect.getsource(RayResourcePool.get_placement_groups)


def pick_node(need: float, nodes: list[dict[str, Any]], free: dict[str, dict], exclude: set[str]) -> str | None:
    """The alive node outside `exclude` with the most free CPUs that has `need` CPUs free (else in all), or None."""
    candidates = [n for n in nodes if n.get("Alive") and n["NodeID"] not in exclude]
    for fits in (
        lambda n: free.get(n["NodeID"], {}).get("CPU", 0.0) >= need,
        lambda n: n.get("Resources", {}).get("CPU", 0.0) >= need,
    ):
        fitting = [n for n in candidates if fits(n)]
        if fitting:
            best = max(fitting, key=lambda n: (free.get(n["NodeID"], {}).get("CPU", 0.0), n["NodeID"]))
            return str(best["NodeID"])
    return None


def apply() -> None:
    global _applied
    if _applied:
        return
    from verl.single_controller.ray import base

    if not needed():
        raise RuntimeError(f"verl changed RayResourcePool.get_placement_groups: the patch of {REPLACED!r} is stale")
    original = base.placement_group

    def placement_group(bundles, strategy="PACK", name="", lifetime=None, **kwargs):
        if strategy == "STRICT_PACK" and name and "bundle_label_selector" not in kwargs:
            import ray

            pool = name.rstrip("0123456789")
            used = _used.setdefault(pool, set())
            need = sum(float(b.get("CPU", 0.0)) for b in bundles)
            node = pick_node(need, ray.nodes(), ray._private.state.available_resources_per_node(), used)
            if node is not None:
                used.add(node)
                kwargs["bundle_label_selector"] = [{NODE_LABEL: node} for _ in bundles]
        return original(bundles=bundles, strategy=strategy, name=name, lifetime=lifetime, **kwargs)

    setattr(base, "placement_group", placement_group)  # noqa: B010 - verl's module, patched
    _applied = True

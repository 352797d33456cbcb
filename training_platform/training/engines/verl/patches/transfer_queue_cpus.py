"""transfer_queue (installed with verl) `controller.py` and `storage/simple_storage.py`, on their actor classes:

    @ray.remote(num_cpus=1)

verl's RL starts TransferQueue's controller and storage unit before it places its workers, and each holds a Ray
CPU for the whole run. On CPU nodes the workers' bundles are Ray CPUs too: on two 2-CPU nodes both TransferQueue
actors landed on one node and left it no CPU for that node's rank, so the run waited forever. They move data
between actors and compute nothing: the patched classes hold no CPU (Ray still places them on a node that has
CPUs). Installed on the CPU platform only."""

from __future__ import annotations

import inspect

REPLACED = "@ray.remote(num_cpus=1)"
_applied = False


def _classes():
    from transfer_queue import controller
    from transfer_queue.storage import simple_storage

    return (
        (controller, "TransferQueueController", controller.TransferQueueController),
        (simple_storage, "SimpleStorageUnit", simple_storage.SimpleStorageUnit),
    )


def needed() -> bool:
    return all(
        f"{REPLACED}\nclass {name}" in inspect.getsource(module) and cls._default_options.get("num_cpus") == 1
        for module, name, cls in _classes()
    )


def apply() -> None:
    global _applied
    if _applied:
        return
    if not needed():
        raise RuntimeError(f"transfer_queue changed its actors' {REPLACED!r}: the patch is stale")
    for _, _, cls in _classes():
        cls._default_options["num_cpus"] = 0
    _applied = True

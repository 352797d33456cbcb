"""Patches of verl 0.9.1 the CPU path needs, one module each (docs/engines.md lists them with the verl lines they
replace). Each has `needed()` (the verl source still has the line it replaces) and `apply()`; tests fail when a verl
upgrade makes a patch wrong or unneeded."""

from training_platform.training.engines.verl.patches import (
    critic_attention,
    node_per_group,
    offload_pin_memory,
    process_group,
    resource_check,
    transfer_queue_cpus,
)

PATCHES = (process_group, critic_attention, offload_pin_memory, resource_check, node_per_group, transfer_queue_cpus)


def apply_all() -> None:
    for patch in PATCHES:
        patch.apply()

"""The patches of verl the CPU path needs (engines/verl/patches/, listed in docs/engines.md). Each test fails when a
verl upgrade makes its patch wrong (the replaced line changed) or unneeded (what it works around is gone)."""

from __future__ import annotations

import pytest
import torch
import verl  # noqa: F401 - proves a feature: `make setup` installs verl; without it this fails, never skips

from training_platform.training.engines.verl.patches import (
    critic_attention,
    offload_pin_memory,
    process_group,
)

pytestmark = pytest.mark.unit


def test_the_process_group_patch_is_needed_and_gives_gloo_on_the_cpu():
    assert process_group.needed(), "verl changed initialize_global_process_group_ray: re-check the patch"
    # What verl would pass on the CPU platform, refused by torch: the reason for the patch.
    with pytest.raises(ValueError, match="[Dd]uplicate"):
        from torch.distributed.distributed_c10d import BackendConfig

        BackendConfig("cpu:gloo,cpu:gloo")
    from training_platform.training.engines.verl import cpu

    cpu.install()
    process_group.apply()
    from verl.utils import distributed

    assert process_group.cpu_backend(None) == "gloo" and process_group.cpu_backend("nccl") == "nccl"
    assert hasattr(distributed.initialize_global_process_group_ray, "__wrapped__"), "verl's function, wrapped"
    import verl.workers.engine_workers as workers

    assert workers.initialize_global_process_group_ray is distributed.initialize_global_process_group_ray


def test_the_critic_attention_patch_is_needed_and_loads_the_critic_with_sdpa(tmp_path):
    assert critic_attention.needed(), "verl no longer hard-codes flash_attention_2 for the critic: drop the patch"
    from transformers import AutoConfig

    from training_platform.demo import prepare_demo

    prepare_demo(tmp_path)
    model_dir = tmp_path / "demo" / "model"
    from verl.utils import model as verl_model

    config = AutoConfig.from_pretrained(model_dir)
    config.num_labels = 1
    with pytest.raises(Exception, match="FlashAttention2"):  # verl's own loader, on a machine without flash-attention
        verl_model.load_valuehead_model(str(model_dir), torch.float32, config, False)
    critic_attention.apply()
    critic = verl_model.load_valuehead_model(str(model_dir), torch.float32, config, False)
    assert critic.config._attn_implementation == "sdpa"
    assert critic(input_ids=torch.tensor([[1, 2, 3]])).logits.shape[-1] == 1, "a value per token"


def test_the_offload_patch_is_needed_and_builds_an_unpinned_cpu_offload_policy():
    assert offload_pin_memory.needed(), "verl no longer pins offloaded reference weights: drop the patch"
    from verl.workers.engine.fsdp import transformer_impl

    offload_pin_memory.apply()
    policy = transformer_impl.CPUOffloadPolicy(pin_memory=True)  # what verl asks for its reference model
    assert type(policy).__name__ == "CPUOffloadPolicy" and policy.pin_memory is False


def test_the_resource_check_patch_is_needed_and_counts_the_cpu_platforms_resource():
    """verl's pool manager counts GPUs/NPUs whatever its platform asks for: on a CPU cluster it would refuse every
    run. With the CPU platform the workers' bundles ask for CPUs and the patched check counts CPUs."""
    from training_platform.training.engines.verl import cpu
    from training_platform.training.engines.verl.patches import resource_check

    assert resource_check.needed(), "verl no longer counts GPUs only in its resource check: drop the patch"
    cpu.install()
    from verl.plugin.platform import get_platform

    platform = get_platform()
    assert platform.ray_resource_name() == "CPU", "CPU bundles: never logical GPUs on a shared cluster"
    assert platform.ray_resource_options(1 / 3) == {"num_cpus": 1 / 3}
    resource_check.apply()
    from unittest import mock

    from verl.single_controller.ray.base import ResourcePoolManager

    manager = ResourcePoolManager(resource_pool_spec={"global_pool": [1, 1]}, mapping={})
    per_node = {"a": {"CPU": 2.0}, "b": {"CPU": 1.0}}  # what Ray reports for two CPU nodes (no GPU key at all)
    with mock.patch("ray._private.state.available_resources_per_node", return_value=per_node):
        manager._check_resource_available()  # 3 CPUs for 2 worker processes: fits
        manager.resource_pool_spec = {"global_pool": [2, 2]}
        with pytest.raises(ValueError, match="3 CPUs available; verl's worker pools need 4"):
            manager._check_resource_available()


def test_the_node_per_group_patch_is_needed_and_gives_each_group_of_a_pool_its_own_node():
    """verl packs each of a pool's per-node placement groups with STRICT_PACK and relies on a node's GPUs being
    used up; two groups of a 2-node CPU job fit on one 2-CPU node. The patch pins each group to a node of its own."""
    from training_platform.training.engines.verl.patches import node_per_group

    assert node_per_group.needed(), "verl changed how it creates its placement groups: re-check the patch"
    nodes = [
        {"NodeID": "a", "Alive": True, "Resources": {"CPU": 2.0}},
        {"NodeID": "b", "Alive": True, "Resources": {"CPU": 2.0}},
        {"NodeID": "c", "Alive": False, "Resources": {"CPU": 8.0}},
    ]
    free = {"a": {"CPU": 2.0}, "b": {"CPU": 1.0}}
    assert node_per_group.pick_node(1, nodes, free, set()) == "a", "the most free CPUs first"
    assert node_per_group.pick_node(1, nodes, free, {"a"}) == "b", "a node the pool has not used"
    assert node_per_group.pick_node(2, nodes, free, {"a"}) == "b", "busy now, but it can hold the group: it waits"
    assert node_per_group.pick_node(1, nodes, free, {"a", "b"}) is None, "no unused node: Ray places it as verl asked"


def test_the_transfer_queue_patch_is_needed_and_its_actors_hold_no_cpu():
    """TransferQueue's controller and storage unit each held a Ray CPU for the whole run; on CPU nodes that took the
    CPU a node's rank needed (both landed on one node and the run waited forever)."""
    from training_platform.training.engines.verl.patches import transfer_queue_cpus

    assert transfer_queue_cpus.needed(), "TransferQueue's actors no longer reserve a CPU: drop the patch"
    transfer_queue_cpus.apply()
    from transfer_queue.controller import TransferQueueController
    from transfer_queue.storage.simple_storage import SimpleStorageUnit

    assert TransferQueueController._default_options["num_cpus"] == 0
    assert SimpleStorageUnit._default_options["num_cpus"] == 0

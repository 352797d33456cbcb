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

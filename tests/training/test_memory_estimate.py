"""The memory check before launch (training/memory.py): parameters counted from config.json as the real model has
them, the parts of an estimate, and a 70B-shaped model refused by the preflight before any weight is read."""

from __future__ import annotations

import copy
import json
import shutil

import pytest
import yaml
from training_helpers import EXAMPLES

from training_platform.training.config import parse_config
from training_platform.training.memory import GIB, ModelShape, estimate

# Llama-2-70B's config.json (the shape only: no weights exist anywhere in these tests).
LLAMA_70B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-05,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
}


def _config(name: str = "sft_tiny", **sections) -> dict:
    raw = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    for section, values in sections.items():
        raw.setdefault(section, {}).update(values)
    return raw


@pytest.mark.unit
def test_llama_70b_parameters_are_counted_exactly():
    assert ModelShape.from_config(LLAMA_70B).parameters() == 68_976_648_192  # the published count


@pytest.mark.integration
def test_the_demo_models_parameters_are_the_real_models(data_dir):
    from transformers import AutoModelForCausalLM

    model_dir = data_dir / "demo" / "model"
    real = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(model_dir).parameters())
    shape = ModelShape.from_config(json.loads((model_dir / "config.json").read_text()))
    assert shape.parameters() == real


@pytest.mark.unit
def test_parts_follow_the_config():
    full = estimate(parse_config(_config(model={"path": "m", "dtype": "bf16"})), LLAMA_70B, "cuda")
    p = full.parameters
    assert full.parts["weights"] == full.parts["gradients"] == 2 * p and full.parts["optimizer"] == 4 * p
    assert "reference" not in full.parts and "kv_cache" not in full.parts
    assert full.describe().startswith(f"~{full.total / GIB:.0f} GiB per device: optimizer 257, weights 128")

    lora = estimate(
        parse_config(_config(model={"path": "m", "dtype": "bf16", "lora": {"r": 8, "target_modules": "all-linear"}})),
        LLAMA_70B,
        "cuda",
    )
    assert lora.trainable < p / 100 and lora.parts["optimizer"] < full.parts["optimizer"] / 100
    checkpointed = estimate(
        parse_config(_config(model={"path": "m", "dtype": "bf16", "gradient_checkpointing": True})), LLAMA_70B, "cuda"
    )
    assert checkpointed.parts["activations"] < full.parts["activations"] / 10

    dpo = estimate(parse_config(_config("dpo_tiny", model={"path": "m", "dtype": "bf16"})), LLAMA_70B, "cuda")
    assert dpo.parts["reference"] == dpo.parts["weights"], "DPO keeps a frozen copy (no LoRA)"
    grpo = parse_config(_config("grpo_tiny", model={"path": "m", "dtype": "bf16"}))
    assert "reference" not in estimate(grpo, LLAMA_70B, "cuda").parts, "beta 0: no reference model"
    assert estimate(grpo, LLAMA_70B, "cuda").parts["kv_cache"] > 0
    with_kl = copy.deepcopy(_config("grpo_tiny", model={"path": "m", "dtype": "bf16"}))
    with_kl["algorithm"]["beta"] = 0.04
    assert "reference" in estimate(parse_config(with_kl), LLAMA_70B, "cuda").parts

    with pytest.raises(KeyError):
        estimate(parse_config(_config()), {"model_type": "mystery"}, "cpu")


@pytest.mark.integration
def test_a_70b_shaped_model_is_refused_before_any_weight_is_read(tp, data_dir, tmp_path):
    big = tmp_path / "llama-70b-shape"
    big.mkdir()
    (big / "config.json").write_text(json.dumps(LLAMA_70B))
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):  # a tokenizer, no weights
        if (data_dir / "demo/model" / name).is_file():
            shutil.copy(data_dir / "demo/model" / name, big / name)
    proc = tp("train", EXAMPLES / "sft_tiny.yaml", "--dry-run", "--set", f"model.path={big}", check=2)
    line = next(x for x in proc.stderr.splitlines() if x.startswith("resources:"))
    assert "needs ~1120 GiB per device: optimizer 514, weights 257, gradients 257" in line, line
    assert "this node's RAM has" in line

    # The demo model fits: the estimate is printed with the effective config.
    proc = tp("train", EXAMPLES / "sft_tiny.yaml", "--dry-run", check=0)
    printed = yaml.safe_load(proc.stdout.split("# memory estimate (peak per device)\n", 1)[1].split("\n#", 1)[0])
    assert printed["memory"]["device"] == "cpu" and 0.3 < printed["memory"]["total_gib"] < 2

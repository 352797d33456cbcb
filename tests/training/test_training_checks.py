"""Real checks of training features that a smoke run alone cannot prove (issue 24).

Each test builds the trainer the TRL engine builds for a config (the algorithm's registered builder over the engine's
TrainContext: TrainingArguments from `common_training_args`, LoRA from `_peft_config`), with the tiny demo model, and
looks inside it:
- SFT `assistant_only_loss`: the labels of the collated batch are -100 exactly outside the assistant turns (system and
  user turns, the chat template's role headers), and the token ids inside them;
- SFT `packing`: several rows share one packed sequence (position ids restart at each row), the packed dataset has
  fewer rows, and every original row is in it once, whole;
- GRPO `loss_type`: each loss type the config accepts gives its own loss on one fixed batch of completions and
  advantages (computed independently from the model's log-probs and compared with TRL's `compute_loss`);
- LoRA: a few optimizer steps change lora_A / lora_B and leave every base weight bit-identical.
"""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

from training_platform.training.algorithms import grpo
from training_platform.training.algorithms.base import params_as
from training_platform.training.config import JobConfig, check_rules, parse_config

MESSAGES_ROWS = [
    {
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What is the sum of the two numbers? 3+5="},
            {"role": "assistant", "content": "The answer is 8"},
        ]
    },
    {
        "messages": [
            {"role": "user", "content": "Hello! 2+2="},
            {"role": "assistant", "content": "4"},
            {"role": "user", "content": "Add the two numbers. 7+6="},
            {"role": "assistant", "content": "Let's think step by step. The answer is 13"},
        ]
    },
]


def _config(data_dir: Path, algorithm: dict, *, data_file: str = "sft.jsonl", **sections) -> JobConfig:
    raw = {
        "model": {"path": str(data_dir / "demo" / "model"), "dtype": "fp32"},
        "data": {"train_file": str(data_dir / "demo" / "data" / data_file), "max_length": 64},
        "algorithm": algorithm,
        "training": {"max_steps": 3, "per_device_batch_size": 2, "save_steps": 1000, "logging_steps": 1},
        "resources": {"device": "cpu"},
    }
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
    cfg = parse_config(raw)
    assert not check_rules(cfg), check_rules(cfg)  # the config is one a user may submit
    return cfg


def _trainer(cfg: JobConfig, run_dir: Path, rows: list[dict]):
    """The trainer the TRL engine builds for `cfg` over `rows` (CPU, fp32, no run-writer callbacks)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from training_platform.training.engines import require_builder
    from training_platform.training.engines.trl.engine import (
        TrainContext,
        _peft_config,
        _to_dataset,
        common_training_args,
    )
    from training_platform.training.rewards import build_reward_function
    from training_platform.training.rundir import RunDir

    path = cfg.model.path
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    run = RunDir(run_dir)
    reward_funcs = (
        [build_reward_function(r.name, r.params) for r in cfg.rewards] if cfg.spec.uses_reward_functions else []
    )
    ctx = TrainContext(
        cfg=cfg,
        run=run,
        model_path=path,
        model=model,
        tokenizer=tokenizer,
        train_dataset=_to_dataset(rows),
        eval_dataset=None,
        common_args=common_training_args(cfg, run, device="cpu", dtype_name="fp32"),
        callbacks=[],
        peft_config=_peft_config(cfg),
        reward_funcs=reward_funcs,
        reward_weights=[1.0] * len(reward_funcs) or None,
        torch_dtype=torch.float32,
    )
    return require_builder("trl", cfg.spec.name).build(ctx)


def _first_batch(trainer) -> dict:
    return next(iter(trainer.get_train_dataloader()))


# ---------------------------------------------------------------------------------------------- SFT


def _assistant_token_mask(tokenizer, messages: list[dict]) -> tuple[list[int], list[bool]]:
    """Token ids of the ChatML rendering and, per token, whether it lies inside an assistant turn's content + its
    <|im_end|> (what the demo template's {% generation %} covers), found from character offsets, not the template."""
    from training_platform.demo.tiny_model import IM_END, IM_START

    text, spans = "", []
    for m in messages:
        header = f"{IM_START}{m['role']}\n"
        body = f"{m['content']}{IM_END}"
        text += header
        if m["role"] == "assistant":
            spans.append((len(text), len(text) + len(body)))
        text += body + "\n"
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    mask = []
    for start, end in enc["offset_mapping"]:
        inside = any(a <= start and end <= b for a, b in spans)
        straddles = any(start < a < end or start < b < end for a, b in spans)
        assert not straddles, f"a token straddles an assistant turn's edge: {text[start:end]!r}"
        mask.append(inside)
    return enc["input_ids"], mask


@pytest.mark.unit
def test_sft_assistant_only_loss_masks_everything_but_assistant_turns(data_dir, tmp_path):
    cfg = _config(data_dir, {"name": "sft", "assistant_only_loss": True})
    trainer = _trainer(cfg, tmp_path / "run", MESSAGES_ROWS)
    assert trainer.args.assistant_only_loss is True
    batch = _first_batch(trainer)
    tokenizer = trainer.processing_class
    seen = 0
    for ids, labels, attention in zip(
        batch["input_ids"].tolist(), batch["labels"].tolist(), batch["attention_mask"].tolist(), strict=True
    ):
        length = sum(attention)
        ids, labels = ids[:length], labels[:length]
        row = next(r for r in MESSAGES_ROWS if _assistant_token_mask(tokenizer, r["messages"])[0] == ids)
        expected_ids, in_assistant = _assistant_token_mask(tokenizer, row["messages"])
        assert ids == expected_ids
        for token, label, inside in zip(ids, labels, in_assistant, strict=True):
            if inside:
                assert label == token, f"assistant token {tokenizer.decode([token])!r} has label {label}"
            else:
                assert label == -100, f"non-assistant token {tokenizer.decode([token])!r} is trained on"
        # both kinds are present: system/user turns and role headers masked, assistant answers kept
        assert any(in_assistant) and not all(in_assistant)
        kept = tokenizer.decode([t for t, lab in zip(ids, labels, strict=True) if lab != -100])
        assistant_text = "".join(m["content"] + "<|im_end|>" for m in row["messages"] if m["role"] == "assistant")
        assert kept == assistant_text
        seen += 1
    assert seen == len(MESSAGES_ROWS)
    # padding is never trained on
    assert (batch["labels"][batch["attention_mask"] == 0] == -100).all()

    # The same rows without assistant_only_loss: every token has its label (the mask above came from the option)
    plain = _trainer(_config(data_dir, {"name": "sft"}), tmp_path / "run_plain", MESSAGES_ROWS)
    plain_batch = _first_batch(plain)
    real = plain_batch["attention_mask"] == 1
    assert (plain_batch["labels"][real] == plain_batch["input_ids"][real]).all()


def _sft_rows(data_dir: Path, n: int) -> list[dict]:
    import json

    lines = (data_dir / "demo" / "data" / "sft.jsonl").read_text().splitlines()[:n]
    return [json.loads(line) for line in lines]


@pytest.mark.unit
def test_sft_packing_puts_several_rows_in_one_sequence(data_dir, tmp_path):
    rows = _sft_rows(data_dir, 24)
    packed = _trainer(_config(data_dir, {"name": "sft", "packing": True}), tmp_path / "packed", rows)
    unpacked = _trainer(_config(data_dir, {"name": "sft", "packing": False}), tmp_path / "unpacked", rows)
    assert packed.args.packing is True and unpacked.args.packing is False

    # Fewer, longer rows, none over max_length; every original row is in a packed row once, whole
    packed_rows, plain_rows = packed.train_dataset.to_list(), unpacked.train_dataset.to_list()
    assert len(plain_rows) == len(rows)
    assert len(packed_rows) < len(plain_rows)
    assert all(len(r["input_ids"]) <= 64 for r in packed_rows)
    pieces = []
    for r in packed_rows:
        start = 0
        for length in r["seq_lengths"]:
            pieces.append(tuple(r["input_ids"][start : start + length]))
            start += length
        assert start == len(r["input_ids"])
    assert sorted(pieces) == sorted(tuple(r["input_ids"]) for r in plain_rows)

    # A collated batch: one flattened sequence whose position ids restart at every packed row
    batch = _first_batch(packed)
    positions = batch["position_ids"]
    assert positions.shape[0] == 1
    starts = (positions[0] == 0).nonzero().flatten().tolist()
    sequences = len(starts)
    assert sequences > packed.args.per_device_train_batch_size  # more rows than the batch has packed sequences
    # each restart is the first token of a row: its label is never a target (no loss across a row boundary)
    assert (batch["labels"][0, starts] == -100).all()
    plain_batch = _first_batch(unpacked)
    assert "position_ids" not in plain_batch and plain_batch["input_ids"].shape[0] == 2  # one row per sequence
    assert batch["input_ids"].numel() > plain_batch["attention_mask"].sum().item()


# ---------------------------------------------------------------------------------------------- GRPO


def _expected_grpo_loss(loss_type: str, per_token_loss, mask, *, max_completion_length: int, num_items, gas: int):
    """The losses of the papers, over one micro-batch of a generation batch of `gas` micro-batches."""
    total = (per_token_loss * mask).sum()
    if loss_type == "grpo":  # per-sequence mean, then the mean over sequences
        return ((per_token_loss * mask).sum(-1) / mask.sum(-1)).mean() / gas
    if loss_type == "bnpo":  # the mean over the micro-batch's tokens
        return total / mask.sum() / gas
    if loss_type == "dr_grpo":  # a constant: sequences x max completion length
        return total / (mask.shape[0] * max_completion_length) / gas
    if loss_type == "dapo":  # the mean over the whole generation batch's tokens
        return total / num_items
    raise AssertionError(f"no expected loss written for loss_type {loss_type!r}: add it to this test")


@pytest.mark.unit
def test_every_grpo_loss_type_gives_its_own_loss(data_dir, tmp_path):
    import torch

    accepted = typing.get_args(grpo.Params.model_fields["loss_type"].annotation)
    assert {"grpo", "dr_grpo", "dapo", "bnpo"} <= set(accepted)
    gas, max_completion = 2, 8
    losses: dict[str, float] = {}
    batch = None
    for loss_type in accepted:
        cfg = _config(
            data_dir,
            {"name": "grpo", "num_generations": 2, "max_completion_length": max_completion, "loss_type": loss_type},
            data_file="rl.jsonl",
            training={"gradient_accumulation_steps": gas},
            rewards=[{"name": "math_answer", "weight": 1.0}],
        )
        params = params_as(cfg.algorithm, grpo.Params)
        rows = [{"prompt": [{"role": "user", "content": "1+2="}], "answer": "3"}] * 4
        trainer = _trainer(cfg, tmp_path / loss_type, rows)
        assert trainer.loss_type == loss_type
        model = trainer.model
        model.train()
        trainer.current_gradient_accumulation_steps = gas  # as the training loop sets it
        tokenizer = trainer.processing_class
        if batch is None:
            batch = _grpo_batch(tokenizer, max_completion)
        with torch.no_grad():
            logits = model(
                input_ids=torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1),
                attention_mask=torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1),
            ).logits
            prompt_len = batch["prompt_ids"].shape[1]
            logps = torch.log_softmax(logits[:, prompt_len - 1 : -1].float() / params.temperature, -1)
            logps = logps.gather(-1, batch["completion_ids"].unsqueeze(-1)).squeeze(-1)
        inputs = {**batch, "old_per_token_logps": logps + batch["offsets"]}
        inputs.pop("offsets")
        loss = trainer.compute_loss(model, inputs)
        assert loss.requires_grad  # a loss to train on, not a number computed aside

        ratio = torch.exp(logps - inputs["old_per_token_logps"])
        eps = params.epsilon
        eps_high = params.epsilon_high or eps
        adv = batch["advantages"].unsqueeze(1)
        per_token = -torch.min(ratio * adv, torch.clamp(ratio, 1 - eps, 1 + eps_high) * adv)
        expected = _expected_grpo_loss(
            loss_type,
            per_token,
            batch["completion_mask"].float(),
            max_completion_length=max_completion,
            num_items=batch["num_items_in_batch"],
            gas=gas,
        )
        assert loss.item() == pytest.approx(expected.item(), rel=1e-4, abs=1e-6), loss_type
        losses[loss_type] = loss.item()
    # Sequences of different lengths, advantages of both signs, a generation batch larger than the micro-batch: the
    # four normalisations must disagree pairwise
    values = sorted(losses.values())
    assert all(b - a > 1e-3 for a, b in zip(values, values[1:], strict=False)), losses


def _grpo_batch(tokenizer, max_completion: int) -> dict:
    """Four completions (two per prompt) of lengths 2..8 with fixed advantages and old log-probs that differ from the
    current ones (ratios on both sides of the clip range)."""
    import torch

    prompts = ["3+4=", "5+1="]
    prompt_ids = [
        list(
            tokenizer.apply_chat_template(
                [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=True, return_dict=False
            )
        )
        for p in prompts
    ]
    assert len({len(p) for p in prompt_ids}) == 1  # no padding: positions are plain
    prompt_ids = [p for p in prompt_ids for _ in range(2)]
    generator = torch.Generator().manual_seed(0)
    vocab = len(tokenizer)
    completion_ids = torch.randint(10, vocab, (4, max_completion), generator=generator)
    lengths = [2, 8, 5, 3]
    mask = torch.tensor([[1] * n + [0] * (max_completion - n) for n in lengths])
    offsets = (torch.rand((4, max_completion), generator=generator) - 0.5) * 0.8  # |log ratio| up to 0.4
    return {
        "prompt_ids": torch.tensor(prompt_ids),
        "prompt_mask": torch.ones(4, len(prompt_ids[0]), dtype=torch.long),
        "completion_ids": completion_ids,
        "completion_mask": mask,
        "advantages": torch.tensor([1.0, -0.5, 0.7, -1.2]),
        "num_items_in_batch": torch.tensor(float(sum(lengths) + 11)),  # + the other micro-batch's tokens
        "offsets": offsets,
    }


# ---------------------------------------------------------------------------------------------- LoRA


@pytest.mark.integration
def test_lora_steps_change_only_the_adapter(data_dir, tmp_path):
    import torch

    cfg = _config(
        data_dir,
        {"name": "sft"},
        model={"lora": {"r": 4, "alpha": 8, "target_modules": "all-linear"}},
        training={"learning_rate": 1e-2, "max_steps": 3},
    )
    trainer = _trainer(cfg, tmp_path / "run", _sft_rows(data_dir, 12))
    model = trainer.model
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    adapter = {name for name in before if "lora_A" in name or "lora_B" in name}
    assert adapter and any("lora_A" in n for n in adapter) and any("lora_B" in n for n in adapter)
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable == adapter
    trainer.train()
    assert trainer.state.global_step == 3
    after = dict(model.named_parameters())
    for name, value in before.items():
        same = torch.equal(after[name], value)
        if name in adapter:
            assert not same, f"adapter weight {name} did not change"
        else:
            assert same, f"base weight {name} changed"

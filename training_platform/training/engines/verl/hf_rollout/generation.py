"""Batched sampling with plain transformers: prompts of token ids in, each completion's token ids and their
log-probs out. The core of the `hf` rollout (server.py serves it to verl); no Ray, no verl here.

- One forward pass per new token for the whole batch (left padding, KV cache through `model.generate`).
- Sampling follows the request: temperature (0 = greedy), top_p, top_k (<= 0 = off), max new tokens; a completion
  ends at the first EOS token (kept, as vLLM keeps it) or at its token budget.
- Log-probs are those the trainer recomputes: log_softmax(logits / temperature) of the raw logits, before top-k /
  top-p (verl's actor scores the same way, so `training/rollout_probs_diff_*` measures only numerics and staleness).
- Requests may differ in budget: a batch generates up to its largest budget and each completion is cut to its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Keys verl's agent loop sends that change nothing here: what each means is handled below or refused.
IGNORED_KEYS = frozenset({"logprobs", "ignore_eos", "seed", "priority"})


@dataclass(frozen=True)
class Sampling:
    """The sampling parameters of one request (verl's agent-loop names)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    repetition_penalty: float = 1.0

    @classmethod
    def from_request(cls, params: dict[str, Any]) -> Sampling:
        unknown = set(params) - {"temperature", "top_p", "top_k", "repetition_penalty", "max_tokens"} - IGNORED_KEYS
        if unknown:
            raise ValueError(f"the hf rollout does not support sampling parameters {sorted(unknown)}")
        top_k = params.get("top_k")
        return cls(
            temperature=float(params.get("temperature", 1.0)),
            top_p=float(params.get("top_p", 1.0)),
            top_k=-1 if top_k is None else int(top_k),
            repetition_penalty=float(params.get("repetition_penalty", 1.0) or 1.0),
        )


@dataclass(frozen=True)
class Completion:
    token_ids: list[int]
    log_probs: list[float]
    finish_reason: str  # "stop" (EOS) or "length"


def eos_ids(model: Any) -> set[int]:
    config = getattr(model, "generation_config", None)
    eos = getattr(config, "eos_token_id", None)
    if eos is None:
        eos = getattr(model.config, "eos_token_id", None)
    if eos is None:
        return set()
    return {int(e) for e in (eos if isinstance(eos, list | tuple) else [eos])}


def generate_batch(
    model: Any,
    prompts: list[list[int]],
    sampling: Sampling,
    max_new_tokens: list[int],
    *,
    pad_token_id: int,
    eos_token_ids: set[int],
) -> list[Completion]:
    """Sample one completion per prompt, all in one batch."""
    import torch
    from transformers import GenerationConfig

    if not prompts:
        return []
    if len(max_new_tokens) != len(prompts) or min(max_new_tokens) < 1:
        raise ValueError("each prompt needs a budget of at least one new token")
    device = next(model.parameters()).device
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    attention = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, prompt in enumerate(prompts):  # left padding: every prompt ends where generation starts
        input_ids[i, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        attention[i, width - len(prompt) :] = 1
    greedy = sampling.temperature <= 0
    config = GenerationConfig(  # from scratch: a checkpoint's generation_config must not change the sampling
        max_new_tokens=max(max_new_tokens),
        do_sample=not greedy,
        temperature=None if greedy else sampling.temperature,
        top_p=None if greedy or sampling.top_p >= 1 else sampling.top_p,
        top_k=None if greedy or sampling.top_k <= 0 else sampling.top_k,
        repetition_penalty=None if sampling.repetition_penalty == 1.0 else sampling.repetition_penalty,
        eos_token_id=sorted(eos_token_ids) or None,
        pad_token_id=pad_token_id,
        use_cache=True,
        output_logits=True,
        return_dict_in_generate=True,
    )
    with torch.inference_mode():
        out = model.generate(
            input_ids=input_ids.to(device), attention_mask=attention.to(device), generation_config=config
        )
    new_tokens = out.sequences[:, width:].cpu()
    logits = torch.stack(out.logits, dim=1).float()  # [batch, steps, vocab], raw
    if not greedy:
        logits = logits / sampling.temperature
    chosen = torch.log_softmax(logits, dim=-1).gather(-1, new_tokens.to(logits.device).unsqueeze(-1)).squeeze(-1)
    chosen = chosen.cpu()
    completions = []
    for i, budget in enumerate(max_new_tokens):
        ids = new_tokens[i].tolist()
        end, reason = min(budget, len(ids)), "length"
        for j in range(end):
            if ids[j] in eos_token_ids:
                end, reason = j + 1, "stop"
                break
        completions.append(Completion(ids[:end], chosen[i, :end].tolist(), reason))
    return completions

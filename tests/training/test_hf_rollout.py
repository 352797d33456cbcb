"""The `hf` rollout (engines/verl/hf_rollout): batched sampling with transformers that returns each token's log-prob
as verl's actor scores it, and the server verl's agent loop calls, which batches concurrent requests and takes the
actor's weights after each update."""

from __future__ import annotations

import asyncio

import pytest
import torch
import verl  # noqa: F401 - proves a feature: `make setup` installs verl; without it this fails, never skips

from training_platform.training.engines.verl.hf_rollout.generation import (
    Sampling,
    eos_ids,
    generate_batch,
)
from training_platform.training.engines.verl.hf_rollout.server import HFRolloutServer

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from training_platform.demo import prepare_demo

    root = tmp_path_factory.mktemp("hf_rollout")
    prepare_demo(root)
    return root / "demo" / "model"


@pytest.fixture(scope="module")
def model(model_dir):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa").eval()


@pytest.fixture(scope="module")
def prompts(model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    texts = ["12+4=", "3+3=", "18+19=", "7+1=", "5+10="]
    chats = [[{"role": "user", "content": t}] for t in texts]
    return [
        tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=True, return_dict=False) for c in chats
    ]


def trainer_log_probs(model, prompt: list[int], completion: list[int], temperature: float) -> list[float]:
    """What verl's actor computes for the completion: one forward pass, log_softmax(logits / T)."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(completion).unsqueeze(-1)).squeeze(-1).tolist()


def run(model, prompts, sampling, budgets, eos=frozenset()):
    return generate_batch(model, prompts, sampling, budgets, pad_token_id=0, eos_token_ids=set(eos))


def test_batched_greedy_equals_one_at_a_time_and_log_probs_are_the_trainers(model, prompts):
    greedy = Sampling(temperature=0)
    batched = run(model, prompts, greedy, [6] * len(prompts))
    for prompt, completion in zip(prompts, batched, strict=True):
        alone = run(model, [prompt], greedy, [6])[0]
        assert completion.token_ids == alone.token_ids, "left padding changes nothing"
        assert len(completion.token_ids) == 6 and completion.finish_reason == "length"
        expected = trainer_log_probs(model, prompt, completion.token_ids, 1.0)
        assert completion.log_probs == pytest.approx(expected, abs=1e-5)


def test_sampled_log_probs_use_the_temperature_before_top_k_and_top_p(model, prompts):
    torch.manual_seed(1)
    sampling = Sampling(temperature=0.7, top_p=0.9, top_k=20)
    out = run(model, prompts, sampling, [5] * len(prompts))
    for prompt, completion in zip(prompts, out, strict=True):
        expected = trainer_log_probs(model, prompt, completion.token_ids, 0.7)
        assert completion.log_probs == pytest.approx(expected, abs=1e-5)
    torch.manual_seed(1)
    again = run(model, prompts, sampling, [5] * len(prompts))
    assert [c.token_ids for c in again] == [c.token_ids for c in out], "seeded sampling repeats"


def test_a_completion_stops_at_eos_keeping_it_and_each_budget_is_its_own(model, prompts):
    greedy = Sampling(temperature=0)
    free = run(model, prompts[:2], greedy, [6, 6])
    first = free[0].token_ids[0]
    stopped = run(model, prompts[:2], greedy, [6, 3], eos={first})
    assert stopped[0].token_ids == [first] and stopped[0].finish_reason == "stop", "EOS kept, generation ends"
    second = free[1].token_ids
    cut = second.index(first) + 1 if first in second[:3] else 3
    assert stopped[1].token_ids == second[:cut], "the shorter budget cuts its own completion"


def test_unknown_sampling_parameters_and_empty_budgets_are_refused(model, prompts):
    with pytest.raises(ValueError, match="does not support sampling parameters"):
        Sampling.from_request({"temperature": 1.0, "best_of": 4})
    assert Sampling.from_request({"temperature": 0.5, "top_k": None, "logprobs": True}).top_k == -1
    with pytest.raises(ValueError, match="at least one new token"):
        run(model, prompts[:1], Sampling(), [0])
    assert eos_ids(model)  # the demo model names its EOS


def test_the_server_batches_concurrent_requests_and_takes_new_weights(model_dir, prompts):
    server = HFRolloutServer(str(model_dir), prompt_length=32, response_length=6)

    async def concurrent(params: dict, n: int):
        return await asyncio.gather(
            *[server.generate(prompts[i % len(prompts)], dict(params), f"r{i}") for i in range(n)]
        )

    outputs = asyncio.run(concurrent({"temperature": 0.0, "logprobs": True}, 8))
    assert server.stats["requests"] == 8 and server.stats["batches"] == 1, server.stats
    assert all(len(o.token_ids) == len(o.log_probs) >= 1 for o in outputs)
    assert outputs[0].token_ids == outputs[5].token_ids, "the same prompt, greedy: the same completion"

    # The actor's update arrives in buckets: zeroed weights give uniform logits (log-prob = -log(vocab)).
    state = {k: torch.zeros_like(v) for k, v in server.model.state_dict().items()}
    names = sorted(state)
    server.update_weights([(n, state[n]) for n in names[: len(names) // 2]])
    server.update_weights([(n, state[n]) for n in names[len(names) // 2 :]])
    assert server.finish_weights_update(global_steps=3)["missing"] == []
    out = asyncio.run(concurrent({"temperature": 1.0, "max_tokens": 2}, 1))[0]
    vocab = server.model.config.vocab_size
    assert out.log_probs == pytest.approx([-torch.log(torch.tensor(float(vocab))).item()] * 2, abs=1e-5)
    assert out.extra_fields["global_steps"] == 3

    server.update_weights([("no.such.weight", torch.zeros(1))])
    with pytest.raises(KeyError, match="no.such.weight"):
        server.finish_weights_update()
    with pytest.raises(ValueError, match="leaves no room"):
        asyncio.run(server.generate(list(range(1, 40)), {}, "long"))

"""Sequence-classification models (reward models, classifiers) loaded and scored: what the inference workers'
`/pooling` route serves (inference/serving.py) and what verl's PPO asks for its rollouts' rewards
(training/engines/verl/reward_server.py). Below both: training and inference are siblings (DESIGN.md).

`pool` scores texts: each text tokenized as a whole (the tokenizer's own special tokens, no chat template), one
forward pass per text (no padding, so a text's score does not depend on its neighbours), and the head's raw outputs
returned (one number for a 1-label reward model: its score; a classifier's logits, no softmax).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training_platform.core.errors import InvalidInput


class PromptError(InvalidInput):
    """The messages cannot be turned into a prompt for this model (too long, rejected by its chat template)."""


def is_classifier(path: str | Path) -> bool:
    """True for a model whose config names only classification heads (reward models, classifiers): it does not
    generate text, it scores it (`pool`)."""
    import json

    try:
        architectures = json.loads((Path(path) / "config.json").read_text()).get("architectures") or []
    except (OSError, ValueError, AttributeError):
        return False  # loading reports what is wrong with it
    return bool(architectures) and all("Classification" in str(a) for a in architectures)


@dataclass
class Classifier:
    """A loaded sequence-classification model (a reward model) with its tokenizer."""

    path: str
    model: Any
    tokenizer: Any
    device: Any
    max_length: int

    def close(self) -> None:
        self.model = None


def load_classifier(path: str, *, device: str = "auto") -> Classifier:
    """A local sequence-classification model directory, ready to score (CUDA when available and asked, the model's
    dtype there; float32 on CPU)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    tokenizer: Any = AutoTokenizer.from_pretrained(path)
    model: Any = AutoModelForSequenceClassification.from_pretrained(
        path, dtype="auto" if dev.type == "cuda" else torch.float32
    )
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    model.to(dev).eval()
    context = 0
    for attr in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(model.config, attr, None)
        if isinstance(value, int) and value > 0:
            context = value
            break
    if not context:
        tok_max = getattr(tokenizer, "model_max_length", None)
        context = tok_max if isinstance(tok_max, int) and 0 < tok_max < 10**8 else 2048
    return Classifier(path=path, model=model, tokenizer=tokenizer, device=dev, max_length=context)


@dataclass
class PoolResult:
    data: list[list[float]]  # per text: the head's outputs (one number for a reward model)
    prompt_tokens: list[int]
    pool_s: float
    timed_out: bool = False
    cancelled: bool = False


def pool(
    classifier: Classifier,
    texts: Sequence[str],
    *,
    should_stop: Callable[[], bool] | None = None,
    deadline: float | None = None,
) -> PoolResult:
    """Score `texts` with a sequence-classification model, one forward pass each. Raises PromptError for an empty
    text or one longer than the model's context. `should_stop()` and `deadline` are checked between texts."""
    import torch

    encoded = []
    for index, text in enumerate(texts):
        ids = classifier.tokenizer(text)["input_ids"]
        if not ids:
            raise PromptError(f"input[{index}] is empty after tokenization")
        if len(ids) > classifier.max_length:
            raise PromptError(
                f"input[{index}] is {len(ids)} tokens; the model's context is {classifier.max_length} tokens"
            )
        encoded.append(ids)
    start = time.perf_counter()
    data: list[list[float]] = []
    for ids in encoded:
        if deadline is not None and time.monotonic() > deadline:
            return PoolResult(data, [len(i) for i in encoded], time.perf_counter() - start, timed_out=True)
        if should_stop is not None and should_stop():
            return PoolResult(data, [len(i) for i in encoded], time.perf_counter() - start, cancelled=True)
        input_ids = torch.tensor([ids], dtype=torch.long, device=classifier.device)
        with torch.inference_mode():
            logits = classifier.model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids)).logits
        data.append([float(v) for v in logits[0].float().tolist()])
    return PoolResult(data, [len(i) for i in encoded], time.perf_counter() - start)

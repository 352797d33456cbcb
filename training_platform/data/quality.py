"""Per-text quality figures: heuristic scores (length, character ratios, duplicated lines, repeated n-grams, unique
words -> `quality` in [0, 1]) and perplexity under a local causal LM. Used by `score` (its stages and driver), by
dedup's `keep: best` and by its Ray stages; kept below them all (data/score.py re-exports the names)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import cast

from training_platform.data.operators.char_ratio import char_ratios
from training_platform.data.operators.repetition import top_ngram_char_fraction


def _clamp(x: float) -> float:
    return 0.0 if x < 0 else (1.0 if x > 1 else x)


def heuristic_scores(text: str) -> dict[str, float]:
    words = [w for w in text.split() if not w.isascii() or any(c.isalnum() for c in w)]  # symbol runs are not words
    n_words = len(words)
    lines = [line for line in text.splitlines() if line.strip()]
    dup_lines = (len(lines) - len(set(lines))) / len(lines) if lines else 0.0
    ratios = char_ratios(text)
    top2 = top_ngram_char_fraction(words, 2, len(text)) if n_words >= 20 else 0.0
    unique = len({w.lower() for w in words}) / n_words if n_words else 0.0
    parts = [
        min(1.0, math.log1p(n_words) / math.log(51)),
        _clamp((ratios["alnum_ratio"] - 0.3) / 0.4),
        1.0 - dup_lines,
        1.0 - _clamp(top2 / 0.3) if n_words >= 20 else 1.0,
        _clamp(unique / 0.5) if n_words >= 20 else 1.0,
    ]
    quality = sum(parts) / len(parts) if n_words else 0.0
    return {
        "chars": len(text),
        "words": n_words,
        **{k: round(v, 4) for k, v in ratios.items()},
        "dup_line_frac": round(dup_lines, 4),
        "top_2gram_char_frac": round(top2, 4),
        "unique_word_ratio": round(unique, 4),
        "quality": round(quality, 4),
    }


def heuristic_quality(text: str) -> float:
    return heuristic_scores(text)["quality"]


# ---------------------------------------------------------------------------------------------- perplexity


class PerplexityScorer:
    """Perplexity of texts under a local causal LM (CPU by default)."""

    def __init__(self, model_path: str | Path, *, max_length: int = 512, batch_size: int = 8, device: str = "cpu"):
        import torch
        from transformers import AutoModelForCausalLM

        from training_platform.data.tokenizer import load_tokenizer

        self.model_path = str(model_path)
        self.tokenizer = load_tokenizer(model_path)
        self.tokenizer.padding_side = "right"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        local = Path(model_path).expanduser().exists()
        model = AutoModelForCausalLM.from_pretrained(str(model_path), local_files_only=local, dtype=torch.float32)
        # transformers decorates PreTrainedModel.to with functools.wraps, which types it as an unbound function
        self.model = cast(torch.nn.Module, model).to(device).eval()
        self.max_length, self.batch_size, self.device = max_length, batch_size, device

    def score(self, texts: list[str]) -> list[float | None]:
        import torch

        out: list[float | None] = []
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start : start + self.batch_size]
            enc = self.tokenizer(
                batch,
                return_tensors="pt",
                padding=True,
                truncation=True,
                max_length=self.max_length,
                add_special_tokens=False,
            ).to(self.device)
            with torch.inference_mode():
                logits = self.model(**enc).logits[:, :-1].float()
            targets = enc["input_ids"][:, 1:]
            mask = enc["attention_mask"][:, 1:].float()
            nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, reduction="none") * mask
            counts = mask.sum(dim=1)
            for total, count in zip(nll.sum(dim=1).tolist(), counts.tolist(), strict=True):
                out.append(round(math.exp(total / count), 4) if count > 0 else None)
        return out

"""Supervised fine-tuning."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from training_platform.training.algorithms.base import AlgorithmParams, AlgorithmSpec, CheckContext


class Params(AlgorithmParams):
    name: Literal["sft"]
    assistant_only_loss: bool = Field(
        False, description="Loss on assistant turns only (needs a chat template with {% generation %} markers)."
    )
    completion_only_loss: bool | None = Field(
        None, description="prompt/completion data: loss on the completion only (default: yes for that format)."
    )
    packing: bool = Field(False, description="Pack several examples into each max_length sequence.")

    def check(self, ctx: CheckContext) -> list[tuple[str, str]]:
        errors = []
        if self.assistant_only_loss and ctx.data_format in ("prompt_completion", "text"):
            errors.append(("algorithm.assistant_only_loss", f"needs conversational data, not {ctx.data_format}"))
        if self.completion_only_loss and ctx.data_format not in ("auto", "prompt_completion"):
            errors.append(("algorithm.completion_only_loss", f"needs prompt_completion data, not {ctx.data_format}"))
        return errors


ALGORITHM = AlgorithmSpec(
    name="sft",
    params=Params,
    data_kind="sft",
    description="Supervised fine-tuning on messages, prompt/completion, alpaca or plain text.",
    metrics=("mean_token_accuracy", "entropy", "num_tokens"),
)

"""GSM8K: grade-school math word problems; the official JSONL (`question`, `answer` ending in `#### N`).

Prompting:
* completion (chat off): lm-evaluation-harness's format, `Question: {question}\\nAnswer:`; n-shot examples are
  `Question: ...\\nAnswer: {full answer}` blocks separated by a blank line; stops at `Question:`.
* chat (default for models with a chat template): one user turn asking for the reasoning and a final `#### N`
  line; n-shot examples become earlier user/assistant turns.
`prompt_template` (a format string over the row) replaces the question text in either style.

Scoring: strict (`#### N`, else `The answer is N`) and flexible (last number) extraction, both reported;
`extracted` / `correct` / `accuracy` use strict when it finds an answer, else flexible.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from training_platform.evaluation.benchmarks.base import Benchmark, Item, format_template, register_benchmark
from training_platform.evaluation.extract import extract_gsm8k, gsm8k_equal, gsm8k_reference
from training_platform.evaluation.generation import GenerationRequest
from training_platform.evaluation.metrics import Metric, accuracy_metric
from training_platform.evaluation.specs import BenchmarkSpec

CHAT_INSTRUCTION = (
    "Solve the following math problem step by step. Write the final answer as a number on the last line, in the "
    'form "#### <number>".\n\n'
)


class GSM8KParams(BenchmarkSpec):
    name: Literal["gsm8k"]


@register_benchmark("gsm8k")
class GSM8K(Benchmark[GSM8KParams]):
    params = GSM8KParams
    default_max_new_tokens = 256
    data_help = "the official GSM8K JSONL: question, answer ending in '#### N'"

    def parse_row(self, row: dict[str, Any], index: int) -> Item:
        question, answer = row.get("question"), row.get("answer")
        if not isinstance(question, str) or not question.strip():
            raise ValueError("missing or empty 'question'")
        if answer is None or (isinstance(answer, str) and not answer.strip()):
            raise ValueError("missing or empty 'answer'")
        gold = gsm8k_reference(answer)
        if gold is None:
            raise ValueError(f"no final answer in 'answer' (expected '#### N'): {str(answer)[-60:]!r}")
        return Item(id=str(row.get("id", index)), row=row, reference=gold, index=index)

    def _question(self, item: Item) -> str:
        if self.spec.prompt_template:
            return format_template(self.spec.prompt_template, item.row)
        return item.row["question"]

    # The same shape as math_problems.build_request on purpose: each task's few-shot layout follows its reference
    # harness (fields, separators, worked answers); a shared template would hide what each prompt looks like.
    def build_request(self, item: Item, shots: list[Item], chat: bool) -> GenerationRequest:
        if chat:
            instruction = "" if self.spec.prompt_template else CHAT_INSTRUCTION
            examples = [(instruction + self._question(s), str(s.row["answer"])) for s in shots]
            return GenerationRequest(messages=self._messages(instruction + self._question(item), examples))
        if self.spec.prompt_template:
            blocks = [f"{self._question(s)} {s.row['answer']}" for s in shots]
            return GenerationRequest(prompt="\n\n".join([*blocks, self._question(item)]))
        blocks = [f"Question: {s.row['question']}\nAnswer: {s.row['answer']}" for s in shots]
        return GenerationRequest(prompt="\n\n".join([*blocks, f"Question: {item.row['question']}\nAnswer:"]))

    def stop_sequences(self, chat: bool) -> tuple[str, ...]:
        return () if chat else ("Question:", "</s>", "<|im_end|>")

    def score(self, item: Item, output: str) -> dict[str, Any]:
        found = extract_gsm8k(output or "")
        gold = item.reference
        return {
            "extracted": found["answer"],
            "correct": gsm8k_equal(gold, found["answer"]),
            "extracted_strict": found["strict"],
            "correct_strict": gsm8k_equal(gold, found["strict"]),
            "extracted_flexible": found["flexible"],
            "correct_flexible": gsm8k_equal(gold, found["flexible"]),
        }

    def metric_names(self) -> list[str]:
        return ["accuracy", "accuracy_strict", "accuracy_flexible", *self._pass_at_k_names()]

    def aggregate(self, records: Sequence[dict[str, Any]]) -> dict[str, Metric]:
        metrics = {
            "accuracy": accuracy_metric(r.get("correct") for r in records),
            "accuracy_strict": accuracy_metric(r.get("correct_strict") for r in records),
            "accuracy_flexible": accuracy_metric(r.get("correct_flexible") for r in records),
        }
        metrics.update(self._pass_at_k(records, "correct"))
        return metrics

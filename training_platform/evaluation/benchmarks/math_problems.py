"""MATH / MATH-500: competition mathematics; JSONL rows with `problem` and `answer` and/or `solution`.

The gold answer is `answer` when present, else the last `\\boxed{}` of `solution`. The model's answer is its last
`\\boxed{}` (braces matched), else `The final answer is $X$`, else `#### X` / `Answer: X` / the last number.
Equivalence: exact numbers, normalised strings, then math-verify (gold first) with its own timeout.

Prompting: chat asks for the final answer in `\\boxed{}`; completion uses `Problem:\\n...\\n\\nSolution:` (n-shot
examples show their solutions).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from training_platform.evaluation.benchmarks.base import Benchmark, Item, format_template, register_benchmark
from training_platform.evaluation.extract import extract_math_answer, math_equal, math_reference
from training_platform.evaluation.generation import GenerationRequest
from training_platform.evaluation.specs import BenchmarkSpec

CHAT_INSTRUCTION = "Solve the following math problem step by step. Put your final answer within \\boxed{}.\n\n"


class MATHParams(BenchmarkSpec):
    name: Literal["math", "math500"]
    math_timeout_s: float = Field(5.0, gt=0, le=120, description="math-verify timeout per comparison.")


@register_benchmark("math", "math500")
class MATH(Benchmark[MATHParams]):
    params = MATHParams
    default_max_new_tokens = 512
    data_help = "JSONL with problem and answer and/or solution (MATH / MATH-500 format)"

    def parse_row(self, row: dict[str, Any], index: int) -> Item:
        problem = row.get("problem")
        if not isinstance(problem, str) or not problem.strip():
            raise ValueError("missing or empty 'problem'")
        if row.get("answer") in (None, "") and not row.get("solution"):
            raise ValueError("needs 'answer' or 'solution'")
        gold = math_reference(row)
        if gold is None:
            raise ValueError("no gold answer: 'answer' is empty and 'solution' has no \\boxed{}")
        item_id = row.get("unique_id", row.get("id", index))
        return Item(id=str(item_id), row=row, reference=gold, index=index)

    def _problem(self, item: Item) -> str:
        if self.spec.prompt_template:
            return format_template(self.spec.prompt_template, item.row)
        return item.row["problem"]

    @staticmethod
    def _worked(item: Item) -> str:
        solution = item.row.get("solution")
        if solution:
            return str(solution)
        return f"The final answer is $\\boxed{{{item.reference}}}$."

    # The same shape as gsm8k.build_request on purpose: each task's few-shot layout follows its reference
    # harness (fields, separators, worked answers); a shared template would hide what each prompt looks like.
    def build_request(self, item: Item, shots: list[Item], chat: bool) -> GenerationRequest:
        if chat:
            instruction = "" if self.spec.prompt_template else CHAT_INSTRUCTION
            examples = [(instruction + self._problem(s), self._worked(s)) for s in shots]
            return GenerationRequest(messages=self._messages(instruction + self._problem(item), examples))
        if self.spec.prompt_template:
            blocks = [f"{self._problem(s)} {self._worked(s)}" for s in shots]
            return GenerationRequest(prompt="\n\n".join([*blocks, self._problem(item)]))
        blocks = [f"Problem:\n{s.row['problem']}\n\nSolution: {self._worked(s)}" for s in shots]
        return GenerationRequest(prompt="\n\n".join([*blocks, f"Problem:\n{item.row['problem']}\n\nSolution:"]))

    def stop_sequences(self, chat: bool) -> tuple[str, ...]:
        return () if chat else ("Problem:", "</s>", "<|im_end|>")

    def score(self, item: Item, output: str) -> dict[str, Any]:
        extracted = extract_math_answer(output or "")
        correct = math_equal(item.reference, extracted, timeout=self.spec.math_timeout_s)
        return {"extracted": extracted, "correct": correct}

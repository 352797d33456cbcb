"""Multiple choice (MMLU-style), scored by log-likelihood over the option letters.

Rows: `question`, `choices` (a list of option texts; or columns `A`, `B`, `C`, ...), `answer` (0-based index, a
letter, or the text of the right option), optional `subject`. The prompt is lm-evaluation-harness's MMLU format:

    The following are multiple choice questions (with answers) about {subject}.   (when there is a subject)

    {question}
    A. {choice 0}
    B. {choice 1}
    Answer:

and the model's choice is the letter whose continuation (" A", " B", ...) has the highest log-likelihood.
n-shot examples precede it as solved questions (`Answer: B`). `tp eval score multiple_choice` scores text outputs
instead: the first standalone option letter in `output`.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from typing import Any, Literal

from training_platform.evaluation.benchmarks.base import Benchmark, Item, format_template, register_benchmark
from training_platform.evaluation.generation import GenerationRequest
from training_platform.evaluation.specs import BenchmarkSpec

LETTERS = string.ascii_uppercase


def _choices(row: dict[str, Any]) -> list[str]:
    choices = row.get("choices", row.get("options"))
    if choices is None:
        choices = []
        for letter in LETTERS:
            if letter not in row:
                break
            choices.append(row[letter])
    if not isinstance(choices, list) or len(choices) < 2:
        raise ValueError("needs 'choices' (a list of at least 2 options) or columns A, B, ...")
    if len(choices) > len(LETTERS):
        raise ValueError(f"at most {len(LETTERS)} choices")
    return [str(c) for c in choices]


def _gold_index(answer: Any, choices: list[str]) -> int:
    if isinstance(answer, bool):
        raise ValueError("'answer' must be an index, a letter or an option text")
    if isinstance(answer, int):
        index = answer
    elif isinstance(answer, str) and answer in choices:  # the text of an option (before letters: "a" may be both)
        index = choices.index(answer)
    elif isinstance(answer, str) and len(answer.strip()) == 1 and answer.strip().upper() in LETTERS:
        index = LETTERS.index(answer.strip().upper())
    elif isinstance(answer, str) and answer.strip().isdigit():
        index = int(answer.strip())
    else:
        raise ValueError(f"'answer' must be a 0-based index, a letter or one of the choices; got {answer!r}")
    if not 0 <= index < len(choices):
        raise ValueError(f"'answer' index {index} is out of range for {len(choices)} choices")
    return index


class MultipleChoiceParams(BenchmarkSpec):
    name: Literal["multiple_choice"]


@register_benchmark("multiple_choice")
class MultipleChoice(Benchmark[MultipleChoiceParams]):
    params = MultipleChoiceParams
    kind = "loglikelihood"
    data_help = "JSONL with question, choices (list), answer (index or letter), optional subject"

    def parse_row(self, row: dict[str, Any], index: int) -> Item:
        question = row.get("question")
        if not isinstance(question, str) or not question.strip():
            raise ValueError("missing or empty 'question'")
        choices = _choices(row)
        if "answer" not in row:
            raise ValueError("missing 'answer'")
        gold = _gold_index(row["answer"], choices)
        return Item(
            id=str(row.get("id", index)),
            row=row,
            reference=LETTERS[gold],
            index=index,
            extra={"choices": choices, "gold": gold},
        )

    def use_chat(self, backend_supports_chat: bool) -> bool:
        return bool(self.spec.chat)  # log-likelihood prompts are plain text unless chat is asked for

    def _block(self, item: Item) -> str:
        if self.spec.prompt_template:
            question = format_template(self.spec.prompt_template, item.row)
        else:
            question = item.row["question"].strip()
        options = "\n".join(f"{LETTERS[i]}. {c}" for i, c in enumerate(item.extra["choices"]))
        return f"{question}\n{options}\nAnswer:"

    def context(self, item: Item, shots: list[Item]) -> str:
        subject = item.row.get("subject")
        header = ""
        if subject:
            header = (
                f"The following are multiple choice questions (with answers) about "
                f"{str(subject).replace('_', ' ')}.\n\n"
            )
        examples = "".join(f"{self._block(s)} {s.reference}\n\n" for s in shots)
        return header + examples + self._block(item)

    def continuations(self, item: Item) -> list[str]:
        return [f" {LETTERS[i]}" for i in range(len(item.extra["choices"]))]

    def build_request(self, item: Item, shots: list[Item], chat: bool) -> GenerationRequest:
        if chat:
            return GenerationRequest(messages=self._messages(self.context(item, shots), []))
        return GenerationRequest(prompt=self.context(item, shots))

    def score_loglikelihoods(self, item: Item, scores: Sequence[tuple[float, bool]]) -> dict[str, Any]:
        logliks = [s[0] for s in scores]
        best = max(range(len(logliks)), key=lambda i: logliks[i])
        return {"extracted": LETTERS[best], "correct": best == item.extra["gold"], "loglikelihoods": logliks}

    def score(self, item: Item, output: str) -> dict[str, Any]:
        valid = LETTERS[: len(item.extra["choices"])]
        match = re.search(rf"\b([{valid}])\b", output or "")
        extracted = match.group(1) if match else None
        return {"extracted": extracted, "correct": extracted == item.reference}

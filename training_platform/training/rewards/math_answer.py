"""`math_answer`: 1.0 when the completion's final answer equals the reference answer, else 0.0.

Final answer, first found of: the last `\\boxed{...}`, the last `#### N`, the last `Answer: X` /
`The answer is X`, the last number in the text. The reference comes from the dataset column `answer_field`
(GSM8K-style `... #### N` references use N; MATH-style solutions use their last `\\boxed{}`).

Comparison: exact numbers first (commas, `$` and a trailing `.` stripped; 0.5 == 1/2), then normalised
string equality, then math-verify (`verify(parse(gold), parse(pred))`, gold first: it is not symmetric).
The extraction and comparison are evaluation's (`evaluation/answers.py`), so a reward and a benchmark agree.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import Field

from training_platform.evaluation.answers import answers_match, extract_answer, reference_answer
from training_platform.training.rewards import RewardFn, RewardParams, completion_text, register_reward

logger = logging.getLogger(__name__)


class MathAnswerParams(RewardParams):
    answer_field: str = Field("answer", min_length=1, description="Dataset column holding the reference answer.")


def score(completion: Any, reference: Any) -> float:
    gold = reference_answer(reference)
    if gold is None:
        return 0.0
    pred = extract_answer(completion_text(completion))
    if pred is None:
        return 0.0
    return 1.0 if answers_match(gold, pred) else 0.0


@register_reward(
    "math_answer",
    MathAnswerParams,
    "1.0 if the final answer (last \\boxed{}, '#### N', 'Answer: X' or last number) equals the reference "
    "(numerically or via math-verify), else 0.0.",
)
def build_math_answer(params: MathAnswerParams) -> RewardFn:
    field = params.answer_field

    def math_answer(completions: list[Any], **kwargs: Any) -> list[float | None]:
        references = kwargs.get(field)
        if references is None:
            raise KeyError(
                f"math_answer: the dataset has no {field!r} column (reward param answer_field); "
                f"columns passed: {sorted(k for k in kwargs if k not in _TRL_KWARGS)}"
            )
        if len(references) != len(completions):
            raise ValueError(f"math_answer: {len(completions)} completions but {len(references)} {field!r} values")
        rewards: list[float | None] = []
        for completion, reference in zip(completions, references, strict=True):
            try:
                rewards.append(score(completion, reference))
            except Exception as exc:  # noqa: BLE001 - one bad sample must never crash training (logged, reward 0)
                logger.warning("math_answer: verification failed (%s: %s); reward 0.0", type(exc).__name__, exc)
                rewards.append(0.0)
        return rewards

    return math_answer


_TRL_KWARGS = frozenset({"prompts", "completion_ids", "trainer_state", "log_extra", "log_metric", "environments"})

"""Final answers, as both the evaluation benchmarks and the `math_answer` reward read them (one implementation, so
a reward and a benchmark agree).

Final answer, first found of: the last `\\boxed{...}` (braces matched), the last `#### N`, the last `Answer: X` /
`The answer is X`, the last number in the text. A reference: GSM8K-style `... #### N` uses N, MATH-style solutions
their last `\\boxed{}`. Comparison: exact numbers first (commas, `$` and a trailing `.` stripped; 0.5 == 1/2), then
normalised string equality, then math-verify (gold first; imported lazily: config validation imports this module and
must stay fast).
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_HASHES = re.compile(r"####\s*([^\n]*)")
_ANSWER_IS = re.compile(r"(?:\banswer\s*(?:is\b\s*:?|:)|\banswer\*+\s*:|\banswer\s*:\*+)[\s*]*([^\n]*)", re.IGNORECASE)
# Fractions, thousands-separated numbers (1,234,567.5), plain numbers; last match wins.
_NUMBER = re.compile(r"-?\d+\s*/\s*\d+|-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?|-?\.\d+")
_NUMERIC = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?(?:/\d+)?")


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` (or `\\fbox{...}`), braces matched; None when absent or unclosed."""
    for match in reversed(list(_BOXED.finditer(text))):
        depth, start = 1, match.end()
        i = start
        while i < len(text):
            char = text[i]
            if char == "\\" and i + 1 < len(text) and text[i + 1] in "{}":
                i += 2  # escaped brace \{ \} is content, not structure
                continue
            if char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
                if depth == 0:
                    return text[start:i].strip()
            i += 1
    return None


def _clean(answer: str) -> str:
    answer = answer.strip().strip("*").strip()
    while answer.endswith("."):
        answer = answer[:-1].rstrip()
    return answer


def extract_answer(text: str) -> str | None:
    """The final answer of a completion, or None when it has none."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    for regex in (_HASHES, _ANSWER_IS):
        matches = [m for m in regex.finditer(text) if _clean(m.group(1))]
        if matches:
            return _clean(matches[-1].group(1))
    numbers = _NUMBER.findall(text)
    return numbers[-1].replace(" ", "") if numbers else None


def reference_answer(reference: Any) -> str | None:
    if reference is None:
        return None
    text = str(reference)
    if "####" in text:
        return _clean(text.rsplit("####", 1)[1]) or None
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    return _clean(text) or None


def as_number(answer: str) -> Fraction | None:
    """Exact value of a plain number ("1,234", "$5", "-0.5", "3/4", "12."); None for anything else."""
    text = answer.replace("\\$", "").replace("$", "").replace(",", "").strip()
    while text.endswith("."):
        text = text[:-1].rstrip()
    if not _NUMERIC.fullmatch(text):
        return None
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None


def _normalise(answer: str) -> str:
    return " ".join(_clean(answer).strip("$").split())


def answers_match(gold: str, pred: str) -> bool:
    gold_number, pred_number = as_number(gold), as_number(pred)
    if gold_number is not None and pred_number is not None:
        return gold_number == pred_number
    if _normalise(gold) == _normalise(pred):
        return True
    # math-verify (gold first) with a real timeout on any thread; see evaluation/math_equiv.py.
    from training_platform.evaluation.math_equiv import math_verify_equal

    return math_verify_equal(gold, pred, timeout=5.0)

"""Answer extraction and comparison for the evaluation benchmarks.

The generic pieces (brace-matched last `\\boxed{}`, the `\\boxed` -> `####` -> `Answer:` -> last-number chain, exact
number parsing) are `evaluation/answers.py`, which the GRPO reward `math_answer` uses too, so training rewards and
evaluation agree. This module adds what
evaluation needs on top:

* GSM8K, lm-evaluation-harness compatible: *strict* = the first `#### N` (else the first `The answer is N`),
  *flexible* = the last number-like token (lm-eval's `(-?[$0-9.,]{2,})|(-?[0-9]+)`); both normalised like lm-eval's
  `regexes_to_ignore` (commas, `$`, a trailing `.`) and then compared as exact numbers (so `8.0` == `8`, where
  lm-eval's string match would say no).
* MATH: the last `\\boxed{}` (braces matched), then Minerva's `The final answer is $X$`, then the generic chain;
  equivalence via exact numbers, normalised strings, then math-verify (gold first) with a real timeout that works
  off the main thread (see `math_equiv`).
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from training_platform.evaluation.answers import as_number, extract_answer, last_boxed
from training_platform.evaluation.math_equiv import math_verify_equal

__all__ = [
    "as_number",
    "extract_answer",
    "extract_gsm8k",
    "extract_gsm8k_flexible",
    "extract_gsm8k_strict",
    "extract_math_answer",
    "gsm8k_equal",
    "gsm8k_reference",
    "last_boxed",
    "math_equal",
    "math_reference",
    "normalize_math_string",
    "normalize_number_text",
]

# lm-eval gsm8k "strict-match" (`#### N`), gsm8k-cot "strict-match" (`The answer is N`) and "flexible-extract".
_GSM8K_HASHES = re.compile(r"#### (\-?[0-9\.\,]+)")
_GSM8K_ANSWER_IS = re.compile(r"[Tt]he (?:final )?answer is:?\s*\**\s*\\?\$?\s*(\-?[0-9\.\,]+)")
_GSM8K_FLEXIBLE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")


def normalize_number_text(text: str) -> str:
    """lm-eval's GSM8K normalisation: drop commas and `$`, one trailing `.`, surrounding space; lower case."""
    text = text.strip().replace(",", "").replace("\\$", "").replace("$", "")
    text = text.strip()
    if text.endswith("."):
        text = text[:-1]
    return text.strip().lower()


def _nonempty(text: str | None) -> str | None:
    """The normalised answer, or None when it holds no digit (e.g. lm-eval's flexible regex matching "..")."""
    if text is None:
        return None
    normalized = normalize_number_text(text)
    return normalized if any(ch.isdigit() for ch in normalized) else None


def extract_gsm8k_strict(text: str) -> str | None:
    """The first `#### N`, else the first `The answer is N` (normalised); None when neither is present."""
    for regex in (_GSM8K_HASHES, _GSM8K_ANSWER_IS):
        match = regex.search(text or "")
        if match:
            return _nonempty(match.group(1))
    return None


def extract_gsm8k_flexible(text: str) -> str | None:
    """The last number-like token (lm-eval flexible-extract), normalised; None when there is none."""
    matches = _GSM8K_FLEXIBLE.findall(text or "")
    if not matches:
        return None
    last = next((group for group in matches[-1] if group), "")
    return _nonempty(last)


def extract_gsm8k(text: str) -> dict[str, str | None]:
    """{"strict", "flexible", "answer"}: `answer` is strict when found, else flexible (the primary score)."""
    strict = extract_gsm8k_strict(text)
    flexible = extract_gsm8k_flexible(text)
    return {"strict": strict, "flexible": flexible, "answer": strict if strict is not None else flexible}


def gsm8k_reference(answer: Any) -> str | None:
    """The number after the last `####` of a GSM8K `answer` (the whole text when it has no `####`)."""
    if answer is None:
        return None
    text = str(answer)
    if "####" in text:
        text = text.rsplit("####", 1)[1]
    return _nonempty(text)


def gsm8k_equal(gold: str | None, pred: str | None) -> bool:
    if gold is None or pred is None:
        return False
    gold_number, pred_number = as_number(gold), as_number(pred)
    if gold_number is not None and pred_number is not None:
        return gold_number == pred_number
    return normalize_number_text(gold) == normalize_number_text(pred)


# --- MATH -----------------------------------------------------------------------------------------------------

_MINERVA = re.compile(r"final answer is\s*\$(.+?)\$", re.IGNORECASE | re.DOTALL)
_TEXT_WRAPPER = re.compile(r"^\\(?:text|textbf|mathrm|mbox)\{(.*)\}$", re.DOTALL)


def _strip_math_delimiters(answer: str) -> str:
    answer = answer.strip()
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if answer.startswith(left) and answer.endswith(right) and len(answer) >= len(left) + len(right):
            answer = answer[len(left) : len(answer) - len(right)].strip()
    while answer.endswith("."):
        answer = answer[:-1].rstrip()
    return answer.strip()


def extract_math_answer(text: str) -> str | None:
    """Last `\\boxed{}` (braces matched), else `The final answer is $X$`, else `#### X` / `Answer: X` / last number."""
    text = text or ""
    boxed = last_boxed(text)
    if boxed is not None:
        return _strip_math_delimiters(boxed) or None
    minerva = _MINERVA.findall(text)
    if minerva:
        return _strip_math_delimiters(minerva[-1]) or None
    fallback = extract_answer(text)
    if fallback is None:
        return None
    return _strip_math_delimiters(fallback) or None


def math_reference(row: dict[str, Any]) -> str | None:
    """The gold answer of a MATH row: `answer` when present, else the last `\\boxed{}` of `solution`."""
    answer = row.get("answer")
    if answer is not None and str(answer).strip():
        text = str(answer)
        boxed = last_boxed(text)
        return _strip_math_delimiters(boxed if boxed is not None else text) or None
    solution = row.get("solution")
    if solution is None:
        return None
    return extract_math_answer(str(solution))


_SPACES = re.compile(r"\s+")


def normalize_math_string(answer: str) -> str:
    """A light, safe normalisation for string equality (math-verify does the real work)."""
    answer = _strip_math_delimiters(answer)
    match = _TEXT_WRAPPER.match(answer)
    if match:
        answer = match.group(1)
    for old, new in (
        ("\\left", ""),
        ("\\right", ""),
        ("\\!", ""),
        ("\\,", ""),
        ("\\;", ""),
        ("\\ ", ""),
        ("dfrac", "frac"),
        ("tfrac", "frac"),
        ("^\\circ", ""),
        ("^{\\circ}", ""),
        ("\\%", ""),
        ("\\$", ""),
    ):
        answer = answer.replace(old, new)
    return _SPACES.sub("", answer)


def _number_value(answer: str) -> Fraction | None:
    value = as_number(answer)
    if value is not None:
        return value
    # \frac{a}{b} / -\frac{a}{b} with integer a, b.
    match = re.fullmatch(r"(-?)\\[dt]?frac\{(-?\d+)\}\{(-?\d+)\}", normalize_math_string(answer))
    if match and int(match.group(3)) != 0:
        value = Fraction(int(match.group(2)), int(match.group(3)))
        return -value if match.group(1) else value
    return None


def math_equal(gold: str | None, pred: str | None, *, timeout: float = 5.0) -> bool:
    """Is `pred` the same answer as `gold`? Exact numbers, then normalised strings, then math-verify (gold first)."""
    if gold is None or pred is None:
        return False
    gold, pred = str(gold).strip(), str(pred).strip()
    if not gold or not pred:
        return False
    gold_number, pred_number = _number_value(gold), _number_value(pred)
    if gold_number is not None and pred_number is not None:
        return gold_number == pred_number
    if normalize_math_string(gold) == normalize_math_string(pred):
        return True
    return math_verify_equal(gold, pred, timeout=timeout)

"""Scorers for `custom` benchmarks: compare a model output with a reference answer.

* exact: the `extract_regex` match, else the stripped output; correct when equal after whitespace (and, unless
  case_sensitive, case) normalisation.
* numeric: the `extract_regex` match, else the final answer (`\\boxed{}`, `####`, `Answer:`, last number); correct
  when it is the same number (exact for rationals, else within `tolerance`).
* math: the `extract_regex` match, else the MATH extraction; correct when `math_equal(reference, extracted)`
  (math-verify, gold first).
* regex: the reference is a regular expression; correct when it matches the output (re.search).
* contains: correct when the reference occurs in the output.

The reference may be a list: any element matching counts as correct. `extract_regex` uses group 1 when the
pattern has a group, else the whole match; the last match wins.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from training_platform.evaluation.extract import as_number, extract_answer, extract_math_answer, math_equal

__all__ = ["SCORERS", "ScoreResult", "score_output"]

SCORERS = ("exact", "numeric", "math", "regex", "contains")


@dataclass
class ScoreResult:
    extracted: str | None
    correct: bool


def _apply_regex(pattern: str, output: str, flags: int) -> str | None:
    matches = list(re.finditer(pattern, output, flags))
    if not matches:
        return None
    last = matches[-1]
    return (last.group(1) if last.re.groups else last.group(0)).strip()


def _norm_ws(text: str, case_sensitive: bool) -> str:
    text = " ".join(text.split())
    return text if case_sensitive else text.casefold()


def _float(text: str) -> float | None:
    value = as_number(text)
    if value is not None:
        return float(value)
    try:
        number = float(text.replace(",", "").strip())
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _numbers_equal(reference: str, extracted: str, tolerance: float) -> bool:
    ref_exact, pred_exact = as_number(reference), as_number(extracted)
    if ref_exact is not None and pred_exact is not None:
        if ref_exact == pred_exact:
            return True
        if tolerance == 0:
            return False
    ref, pred = _float(reference), _float(extracted)
    if ref is None or pred is None:
        return False
    return math.isclose(ref, pred, rel_tol=tolerance, abs_tol=tolerance)


def score_output(
    scorer: str,
    output: str,
    reference: Any,
    *,
    extract_regex: str | None = None,
    case_sensitive: bool = False,
    tolerance: float = 1e-6,
    math_timeout: float = 5.0,
) -> ScoreResult:
    if scorer not in SCORERS:
        raise ValueError(f"unknown scorer {scorer!r}; choose one of: {', '.join(SCORERS)}")
    output = output or ""
    references = [str(r) for r in reference] if isinstance(reference, list | tuple) else [str(reference)]
    flags = 0 if case_sensitive else re.IGNORECASE

    if scorer == "regex":
        for pattern in references:
            match = re.search(pattern, output, flags)
            if match:
                return ScoreResult(match.group(0), True)
        return ScoreResult(None, False)
    if scorer == "contains":
        haystack = output if case_sensitive else output.casefold()
        for ref in references:
            if (ref if case_sensitive else ref.casefold()) in haystack:
                return ScoreResult(ref, True)
        return ScoreResult(None, False)

    default_extractors: dict[str, Callable[[str], str | None]] = {
        "exact": lambda text: text.strip(),
        "numeric": extract_answer,
        "math": extract_math_answer,
    }
    extracted = _apply_regex(extract_regex, output, flags) if extract_regex else default_extractors[scorer](output)
    if extracted is None or extracted == "":
        return ScoreResult(None, False)
    for ref in references:
        if scorer == "exact":
            ok = _norm_ws(extracted, case_sensitive) == _norm_ws(ref, case_sensitive)
        elif scorer == "numeric":
            ok = _numbers_equal(ref, extracted, tolerance)
        else:
            ok = math_equal(ref, extracted, timeout=math_timeout)
        if ok:
            return ScoreResult(extracted, True)
    return ScoreResult(extracted, False)

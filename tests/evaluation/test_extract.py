"""Answer extraction and comparison: GSM8K strict/flexible, MATH \\boxed{}, math-verify equivalence, scorers."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from training_platform.evaluation import math_equiv
from training_platform.evaluation.extract import (
    extract_gsm8k,
    extract_gsm8k_flexible,
    extract_gsm8k_strict,
    extract_math_answer,
    gsm8k_equal,
    gsm8k_reference,
    math_equal,
    math_reference,
)
from training_platform.evaluation.scorers import score_output

pytestmark = pytest.mark.unit


# --- GSM8K ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "strict", "flexible"),
    [
        ("Natalia sold 48/2 = 24 clips in May.\n#### 72", "72", "72"),
        ("#### 1,234", "1234", "1234"),  # thousands separator
        ("The answer is $1,234.", "1234", "1234"),  # dollar sign and trailing period
        ("The answer is -5.", "-5", "-5"),  # negative
        ("He owes #### -3\nQuestion: next one 7", "-3", "7"),  # strict takes the first ####, flexible the last
        ("So she has 5 + 3 = 8 apples.", None, "8"),  # no marker: only flexible finds it
        ("It costs $18.50 in total.", None, "18.50"),
        ("I am not sure.", None, None),  # no answer at all
        ("Hmm...", None, None),  # lm-eval's flexible regex matches "..": not an answer
        ("", None, None),
        ("The final answer is 42", "42", "42"),
        ("#### 0.5", "0.5", "0.5"),
    ],
)
def test_gsm8k_strict_and_flexible(text, strict, flexible):
    assert extract_gsm8k_strict(text) == strict
    assert extract_gsm8k_flexible(text) == flexible
    found = extract_gsm8k(text)
    assert found["answer"] == (strict if strict is not None else flexible)


def test_gsm8k_reference_and_equality():
    assert gsm8k_reference("She pays 2 * 600 = 1,200 dollars.\n#### 1,200") == "1200"
    assert gsm8k_reference("#### -7") == "-7"
    assert gsm8k_reference("no hashes 12") == "no hashes 12"  # no digits-only answer: compared as a string
    assert gsm8k_equal("1200", "1,200")
    assert gsm8k_equal("1200", "$1,200.")
    assert gsm8k_equal("8", "8.0")  # numerically equal (lm-eval's string match would disagree)
    assert gsm8k_equal("0.5", "1/2")
    assert not gsm8k_equal("-5", "5")
    assert not gsm8k_equal("72", None)
    assert not gsm8k_equal("12", "1.2")


# --- MATH -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so the result is \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}"),
        ("first \\boxed{3} then \\boxed{\\sqrt{2}}", "\\sqrt{2}"),  # the last box
        ("\\boxed{\\left\\{1, 2\\right\\}}", "\\left\\{1, 2\\right\\}"),  # escaped braces are content
        ("\\boxed{x^{2} + \\frac{a}{b^{3}}}", "x^{2} + \\frac{a}{b^{3}}"),  # nested braces matched
        ("Final Answer: The final answer is $\\frac{3}{4}$. I hope it is correct.", "\\frac{3}{4}"),
        ("The answer is: 17", "17"),
        ("we get 3, then 4 and finally 10", "10"),  # last number fallback
        ("\\boxed{unclosed", None),  # an unclosed box is no box; and there is no number either
        ("nothing here", None),
        ("$\\boxed{5}$.", "5"),
    ],
)
def test_math_extraction(text, expected):
    assert extract_math_answer(text) == expected


def test_math_reference_prefers_answer_then_boxed_solution():
    assert math_reference({"problem": "p", "answer": "\\frac{1}{2}", "solution": "\\boxed{9}"}) == "\\frac{1}{2}"
    assert math_reference({"problem": "p", "solution": "thus \\boxed{\\dfrac{\\pi}{4}}."}) == "\\dfrac{\\pi}{4}"
    assert math_reference({"problem": "p", "answer": "$5$"}) == "5"


@pytest.mark.parametrize(
    ("gold", "pred", "expected"),
    [
        ("\\frac{1}{2}", "0.5", True),  # boxed fraction vs decimal
        ("0.5", "\\frac{1}{2}", True),
        ("\\frac{1}{2}", "1/2", True),
        ("\\dfrac{1}{2}", "\\frac12", True),
        ("-\\frac{3}{4}", "-0.75", True),
        ("1,000", "1000", True),
        ("x^2+1", "1+x^2", True),  # symbolic, via math-verify
        ("\\frac{\\sqrt{2}}{2}", "\\sqrt{2}/2", True),
        ("3", "4", False),
        ("\\frac{1}{2}", "0.51", False),
        ("2", "x", False),
        ("5", None, False),  # no answer
        ("5", "", False),
    ],
)
def test_math_equal(gold, pred, expected):
    assert math_equal(gold, pred) is expected


def test_math_verify_works_off_the_main_thread():
    results = {}

    def work():
        results["symbolic"] = math_equal("x^2+1", "1+x^2")
        results["fraction"] = math_equal("\\frac{1}{2}", "0.5")
        results["different"] = math_equal("x^2", "x^3")

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(timeout=120)
    assert results == {"symbolic": True, "fraction": True, "different": False}


def test_math_verify_helper_is_killed_on_timeout_and_restarted():
    # A helper that answers "ready" and then never answers: the caller must give up after its timeout, kill it
    # and start a fresh one for the next comparison.
    hang = "import sys, time\nprint('ready', flush=True)\nfor line in sys.stdin:\n    time.sleep(3600)\n"
    worker = math_equiv._Worker([sys.executable, "-c", hang], grace_s=0.2)
    try:
        start = time.monotonic()
        assert worker.verify("1", "1", timeout=0.3) is False
        assert time.monotonic() - start < 0.5 + 5
        assert worker._proc is None  # killed
        assert worker.verify("1", "1", timeout=0.2) is False
        assert worker.restarts == 2
    finally:
        worker.shutdown()


# --- custom scorers ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scorer", "output", "reference", "kwargs", "extracted", "correct"),
    [
        ("exact", "  Paris ", "paris", {}, "Paris", True),
        ("exact", "Paris", "paris", {"case_sensitive": True}, "Paris", False),
        ("exact", "The capital is Paris.", "Paris", {"extract_regex": r"capital is (\w+)"}, "Paris", True),
        ("numeric", "so it is 1,250.0 dollars", "1250", {}, "1,250.0", True),
        ("numeric", "\\boxed{3.14159}", "3.1416", {"tolerance": 1e-3}, "3.14159", True),
        ("numeric", "#### 7", "8", {}, "7", False),
        ("numeric", "no number", "8", {}, None, False),
        ("math", "thus \\boxed{\\frac{1}{2}}", "0.5", {}, "\\frac{1}{2}", True),
        ("regex", "ID: AB-1234", r"[A-Z]{2}-\d{4}", {}, "AB-1234", True),
        ("regex", "nothing", r"\d+", {}, None, False),
        ("contains", "The Eiffel Tower is in PARIS.", "paris", {}, "paris", True),
        ("contains", "It is in Rome.", ["paris", "rome"], {}, "rome", True),
        ("contains", "It is in Rome.", "paris", {}, None, False),
    ],
)
def test_scorers(scorer, output, reference, kwargs, extracted, correct):
    result = score_output(scorer, output, reference, **kwargs)
    assert (result.extracted, result.correct) == (extracted, correct)


def test_unknown_scorer():
    with pytest.raises(ValueError, match="unknown scorer"):
        score_output("fuzzy", "a", "a")

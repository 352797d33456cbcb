"""Reward-function registry and the built-in rewards (TRL calling convention)."""

from __future__ import annotations

import pickle
import threading

import pytest
from pydantic import ValidationError

from training_platform.evaluation.answers import extract_answer, last_boxed
from training_platform.training.rewards import (
    REWARDS,
    RewardDefinition,
    RewardParams,
    build_reward_function,
    completion_text,
    get_reward,
    register_reward,
)

pytestmark = pytest.mark.unit

BUILTIN = {"math_answer", "format", "length_penalty", "overclarification_penalty"}


def conv(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


def call(fn, completions, completion_ids=None, **columns):
    """Call a reward exactly like TRL's GRPOTrainer does, extra trainer kwargs included."""
    return fn(
        prompts=["question"] * len(completions),
        completions=completions,
        completion_ids=completion_ids if completion_ids is not None else [[1, 2]] * len(completions),
        trainer_state=object(),
        log_extra=lambda *a, **k: None,
        log_metric=lambda *a, **k: None,
        **columns,
    )


# ---------------------------------------------------------------- registry


def test_registry_populated_on_import():
    assert set(REWARDS) >= BUILTIN
    for name in BUILTIN:
        definition = get_reward(name)
        assert isinstance(definition, RewardDefinition)
        assert definition.name == name
        assert issubclass(definition.params_model, RewardParams)
        assert definition.description


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_built_function_named_after_registry_entry(name):
    fn = build_reward_function(name, {})
    assert fn.__name__ == name
    # TRL's display name helper
    from trl.trainer.utils import get_callable_name

    assert get_callable_name(fn) == name


def test_unknown_reward_lists_known_names():
    with pytest.raises(KeyError) as excinfo:
        get_reward("nope")
    message = str(excinfo.value)
    assert "nope" in message
    for name in BUILTIN:
        assert name in message
    with pytest.raises(KeyError):
        build_reward_function("nope", {})


def test_unknown_param_rejected():
    with pytest.raises(ValidationError):
        build_reward_function("format", {"patern": "x"})


def test_duplicate_registration_rejected():
    with pytest.raises(ValueError, match="already registered"):
        register_reward("format", RewardParams, "dup")(lambda params: None)


def test_built_function_is_picklable():
    fn = build_reward_function("length_penalty", {"max_length": 10, "buffer": 4, "unit": "chars"})
    clone = pickle.loads(pickle.dumps(fn))
    assert clone.__name__ == "length_penalty"
    assert clone.params == fn.params
    assert call(clone, ["x" * 8]) == call(fn, ["x" * 8]) == [-0.5]


def test_completion_text():
    assert completion_text("plain") == "plain"
    assert completion_text(conv("8")) == "8"
    assert (
        completion_text(
            [
                {"role": "assistant", "content": "a"},
                {"role": "tool", "content": "t"},
                {"role": "assistant", "content": "b"},
            ]
        )
        == "b"
    )
    assert completion_text([{"role": "assistant", "content": [{"type": "text", "text": "hi"}]}]) == "hi"
    assert completion_text(None) == ""


# ---------------------------------------------------------------- math_answer


def test_last_boxed_matches_nested_braces():
    assert last_boxed(r"\boxed{1} then \boxed{\frac{a^{2}}{\sqrt{b}}} end") == r"\frac{a^{2}}{\sqrt{b}}"
    assert last_boxed(r"\boxed{\{1,2\}}") == r"\{1,2\}"
    assert last_boxed(r"\boxed{unclosed") is None


def test_extract_answer_priorities():
    assert extract_answer(r"3 then \boxed{4} then 5") == "4"
    assert extract_answer("7 steps\n#### 1,234\n9") == "1,234"
    assert extract_answer("so 3 + 4. The answer is 7.") == "7"
    assert extract_answer("**Answer:** 12\n") == "12"
    assert extract_answer("first 3, then -4.5 apples") == "-4.5"
    assert extract_answer("no digits here") is None


def test_math_answer_strings():
    fn = build_reward_function("math_answer", {})
    completions = [
        r"Half of it: \boxed{\frac{1}{2}}",  # latex vs decimal gold -> math-verify
        r"\boxed{\frac{\sqrt{4}}{2^{2}}}",  # nested braces: 2/4 = 1/2
        "Adding up...\n#### 1,234",
        "The answer is 7.",
        r"\boxed{8}",  # wrong
        "I don't know",  # nothing to extract
        "The answer is 6.",  # right answer, gold column is None
    ]
    answers = ["0.5", "0.5", "some reasoning #### 1234", "7", "9", "3", None]
    assert call(fn, completions, answer=answers) == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0]


def test_math_answer_conversational_and_custom_field():
    fn = build_reward_function("math_answer", {"answer_field": "solution"})
    completions = [conv(r"so \boxed{x^2+1}"), conv("The answer is $3"), conv("42")]
    assert call(fn, completions, solution=["1+x^2", "3", "41"]) == [1.0, 1.0, 0.0]


def test_math_answer_missing_column_is_an_error():
    fn = build_reward_function("math_answer", {"answer_field": "gold"})
    with pytest.raises(KeyError, match="gold"):
        call(fn, ["1"], answer=["1"])


def test_math_answer_from_worker_thread():
    fn = build_reward_function("math_answer", {})
    results: list = []
    errors: list = []

    def work():
        try:
            results.append(call(fn, [r"\boxed{\frac{1}{2}}", conv(r"\boxed{\frac{1}{3}}")], answer=["0.5", "0.5"]))
        except Exception as exc:  # noqa: BLE001 - pragma: no cover; any error is surfaced by the assert below
            errors.append(exc)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(timeout=60)
    assert not errors
    assert results == [[1.0, 0.0]]


def test_math_answer_sample_error_scores_zero(monkeypatch):
    from training_platform.training.rewards import math_answer as module

    def boom(gold, pred):
        raise RuntimeError("sympy exploded")

    monkeypatch.setattr(module, "answers_match", boom)
    fn = build_reward_function("math_answer", {})
    assert call(fn, ["1", "2"], answer=["1", "2"]) == [0.0, 0.0]


# ---------------------------------------------------------------- format


def test_format_default_pattern():
    fn = build_reward_function("format", {})
    completions = ["<think>\nreason\n</think>\n42", "42", "<think>reason</think>", conv("<think>x</think> 7")]
    assert call(fn, completions) == [1.0, 0.0, 0.0, 1.0]


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("search", [1.0, 1.0, 1.0]), ("match", [1.0, 1.0, 0.0]), ("fullmatch", [1.0, 0.0, 0.0])],
)
def test_format_modes(mode, expected):
    fn = build_reward_function("format", {"pattern": r"ANSWER: \d+", "mode": mode})
    assert call(fn, ["ANSWER: 12", conv("ANSWER: 12 done"), "so ANSWER: 12"]) == expected


def test_format_bad_regex_rejected():
    with pytest.raises(ValidationError, match="invalid regular expression"):
        build_reward_function("format", {"pattern": "(unclosed"})
    with pytest.raises(ValidationError):
        build_reward_function("format", {"mode": "anywhere"})


# ---------------------------------------------------------------- length_penalty


def test_length_penalty_token_boundaries():
    fn = build_reward_function("length_penalty", {"max_length": 10, "buffer": 4})
    lengths = [0, 6, 7, 8, 10, 11, 50]
    ids = [[0] * n for n in lengths]
    rewards = call(fn, ["x"] * len(lengths), completion_ids=ids)
    assert rewards == pytest.approx([0.0, 0.0, -0.25, -0.5, -1.0, -1.0, -1.0])


def test_length_penalty_chars_and_conversational():
    fn = build_reward_function("length_penalty", {"max_length": 10, "buffer": 4, "unit": "chars"})
    # unit=chars ignores token ids
    assert call(fn, ["x" * 6, conv("x" * 8), "x" * 11], completion_ids=[[0]] * 3) == [0.0, -0.5, -1.0]


def test_length_penalty_falls_back_to_chars_without_ids():
    fn = build_reward_function("length_penalty", {"max_length": 10, "buffer": 4})
    assert fn(completions=["x" * 8]) == [-0.5]


def test_length_penalty_zero_buffer():
    fn = build_reward_function("length_penalty", {"max_length": 5, "buffer": 0})
    assert call(fn, ["a"] * 3, completion_ids=[[0] * 5, [0] * 6, []]) == [0.0, -1.0, 0.0]


@pytest.mark.parametrize(
    "params",
    [
        {"max_length": 10, "buffer": 10},
        {"max_length": 10, "buffer": 11},
        {"max_length": 0, "buffer": 0},
        {"buffer": -1},
        {"unit": "words"},
    ],
)
def test_length_penalty_invalid_params(params):
    with pytest.raises(ValidationError):
        build_reward_function("length_penalty", params)


# ---------------------------------------------------------------- overclarification_penalty


def test_overclarification_counts_and_cap():
    fn = build_reward_function("overclarification_penalty", {"alpha": 0.1, "cap": 2})
    completions = [
        "The answer is 4.",
        "Do you mean apples? The answer is 4.",
        "Which unit? Metric or imperial? Per day?",
        conv("Could you clarify?\nWhat is the budget?"),
        "See https://example.com/?q=1 for details.",
    ]
    assert call(fn, completions) == pytest.approx([0.0, -0.1, -0.2, -0.2, 0.0])


def test_overclarification_default_and_think_ignored():
    fn = build_reward_function("overclarification_penalty", {})
    assert call(fn, ["A? B? C? D? E?"]) == pytest.approx([-0.21])
    assert call(fn, ["<think>What is 2+2? Is it 4?</think>It is 4."]) == [0.0]
    counting_think = build_reward_function("overclarification_penalty", {"ignore_think": False})
    assert call(counting_think, ["<think>What is 2+2? Is it 4?</think>It is 4."]) == pytest.approx([-0.14])


def test_overclarification_patterns():
    fn = build_reward_function(
        "overclarification_penalty", {"alpha": 1.0, "patterns": [r"\bclarify\b", r"do you mean"]}
    )
    text = "Is this right? Could you CLARIFY the scope? Do you mean the API? Ok."
    assert call(fn, [text, conv(text)]) == [-2.0, -2.0]


@pytest.mark.parametrize(
    "params", [{"alpha": -0.1}, {"cap": -1}, {"patterns": ["(bad"]}, {"patterns": []}, {"alpha": "lots"}]
)
def test_overclarification_invalid_params(params):
    with pytest.raises(ValidationError):
        build_reward_function("overclarification_penalty", params)

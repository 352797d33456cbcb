"""`calculator`: exact arithmetic on numbers with + - * / // % ** and parentheses, by walking Python's syntax tree.

Nothing is evaluated as code (no `eval`, no names, calls, attributes, subscripts or comparisons): a node of any other
kind is refused. Bounded by construction: an expression of at most `MAX_EXPRESSION_CHARS` characters, exponents of
at most `MAX_EXPONENT` in absolute value and every intermediate result of at most `MAX_MAGNITUDE` in absolute value,
so no call can take long or use much memory. Integers stay exact (37*48 is 1776, not 1776.0); a float result that
is a whole number is written without its `.0`.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable

from pydantic import Field

from training_platform.training.tools import NoParams, ToolArgs, ToolResult, ToolRun, register_tool

MAX_EXPRESSION_CHARS = 200
MAX_EXPONENT = 64
MAX_MAGNITUDE = 1e100

Number = int | float

_BINARY: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Number], Number]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}


class CalculatorError(ValueError):
    """The expression is not plain arithmetic, or leaves the bounds."""


class CalculatorArgs(ToolArgs):
    expression: str = Field(
        min_length=1,
        max_length=MAX_EXPRESSION_CHARS,
        description=f"Arithmetic on numbers with + - * / // % ** and parentheses, e.g. 37*48 "
        f"(at most {MAX_EXPRESSION_CHARS} characters)",
    )


def _bounded(value: Number) -> Number:
    if isinstance(value, complex):  # (-8) ** 0.5
        raise CalculatorError("the result is not a real number")
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("the result is not a finite number")
    if abs(value) > MAX_MAGNITUDE:
        raise CalculatorError(f"a result is larger than {MAX_MAGNITUDE:g} in absolute value")
    return value


def _walk(node: ast.AST) -> Number:
    if isinstance(node, ast.Expression):
        return _walk(node.body)
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise CalculatorError(f"only numbers are allowed, not {type(node.value).__name__}")
        return _bounded(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_walk(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _walk(node.left), _walk(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise CalculatorError(f"exponents are at most {MAX_EXPONENT} in absolute value")
        try:
            return _bounded(_BINARY[type(node.op)](left, right))
        except ZeroDivisionError:
            raise CalculatorError("division by zero") from None
        except OverflowError:
            raise CalculatorError(f"a result is larger than {MAX_MAGNITUDE:g} in absolute value") from None
    what = type(node).__name__.lower()
    raise CalculatorError(f"only numbers, + - * / // % ** and parentheses are allowed (found a {what})")


def evaluate(expression: str) -> Number:
    """The value of `expression` (CalculatorError when it is not bounded arithmetic)."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"the expression is over {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise CalculatorError("not an arithmetic expression") from None
    return _walk(tree)


def format_number(value: Number) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(value)


@register_tool(
    "calculator",
    CalculatorArgs,
    NoParams,
    "Evaluate an arithmetic expression exactly (+ - * / // % ** and parentheses).",
)
def build_calculator(params: NoParams) -> ToolRun:
    def run(args: CalculatorArgs, *, timeout_s: float) -> ToolResult:
        try:
            return ToolResult(format_number(evaluate(args.expression)), True)
        except CalculatorError as exc:
            return ToolResult(f"error: {exc}", False)

    return run

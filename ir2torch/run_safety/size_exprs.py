"""Integer evaluation of the size expressions a symbolic probe records (:mod:`~ir2torch.run_safety.symbolic_probe`).

A shape environment's guards and a probe's peak are ``sympy`` expressions over the size symbols: sums, products,
maxima, integer divisions and comparisons. ``expr.xreplace(values)`` decides them, but costs milliseconds on the
peak of a decoder's step (a maximum of a few hundred sums). :func:`evaluate` walks the expression tree once with
Python integers instead: every node type it knows computes exactly as ``sympy`` (and torch's size functions) define
it, and an expression holding any other type is decided by ``sympy`` itself (:func:`decide`). Nothing is compiled
or evaluated as code.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from functools import reduce
from typing import Any

#: ``sympy`` / ``torch.utils._sympy.functions`` class name -> its integer meaning over its evaluated arguments.
_OPS: dict[str, Callable[..., Any]] = {
    "Add": lambda *a: sum(a),
    "Mul": lambda *a: reduce(operator.mul, a, 1),
    "Max": lambda *a: max(a),
    "Min": lambda *a: min(a),
    "FloorDiv": lambda a, b: a // b,
    "CleanDiv": lambda a, b: a // b,
    "CeilDiv": lambda a, b: -(-a // b),
    "PythonMod": lambda a, b: a % b,
    "Mod": lambda a, b: a % b,  # sympy's Mod of integers takes the divisor's sign, as Python's %
    "PowByNatural": lambda a, b: a ** b,
    "StrictLessThan": operator.lt,
    "LessThan": operator.le,
    "StrictGreaterThan": operator.gt,
    "GreaterThan": operator.ge,
    "Equality": operator.eq,
    "Unequality": operator.ne,
    "And": lambda *a: all(a),
    "Or": lambda *a: any(a),
    "Not": operator.not_,
}


class _Unknown(Exception):
    pass


def _walk(expr: Any, values: dict[Any, int], seen: dict[Any, Any]) -> Any:
    hit = seen.get(expr)
    if hit is not None:
        return hit
    if expr.is_Symbol:
        result: Any = values[expr]
    elif getattr(expr, "is_Integer", False):
        result = int(expr)
    elif expr is True or expr is False or type(expr).__name__ in ("BooleanTrue", "BooleanFalse"):
        result = bool(expr)
    elif type(expr).__name__ == "Pow" and getattr(expr.args[1], "is_Integer", False) and int(expr.args[1]) >= 0:
        result = _walk(expr.args[0], values, seen) ** int(expr.args[1])
    else:
        op = _OPS.get(type(expr).__name__)
        if op is None:
            raise _Unknown
        result = op(*(_walk(a, values, seen) for a in expr.args))
    if isinstance(result, float) and not math.isfinite(result):
        raise _Unknown
    seen[expr] = result
    return result


def evaluate(expr: Any, values: dict[Any, int]) -> Any:
    """``expr`` at ``values`` (symbol -> int): an int or a bool. Raises ``KeyError`` for a symbol without a value;
    a node type it does not know is decided by ``sympy`` (exactly, slower)."""
    if isinstance(expr, (bool, int)):
        return expr
    try:
        return _walk(expr, values, {})
    except _Unknown:
        return decide(expr, values)


def decide(expr: Any, values: dict[Any, int]) -> Any:
    """``expr`` at ``values`` by ``sympy`` substitution (the expression's own ``subs``: sympy is not imported here):
    an int or a bool (``TypeError`` when it stays symbolic)."""
    result = expr.subs(values)
    if getattr(result, "is_Boolean", False):
        return bool(result)
    if getattr(result, "is_Integer", False):
        return int(result)
    raise TypeError(f"the size expression {str(expr)[:80]} is not decided by its symbols' values")


__all__ = ["decide", "evaluate"]

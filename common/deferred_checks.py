"""Runtime checks on sizes read from data kept aside while ``torch.export`` traces a rebuilt forward, and checked
when that forward ends, in the order in which export learned them when it traced the original.

A rebuilt graph's ``aten._assert_scalar`` nodes (:mod:`ir2torch.codegen.deferred_asserts`) and the assertion an
opaque leaf's stand-in makes on an input size computed from data (:mod:`torch2ir.opaque.same_call`, when a rebuild
is converted again) are kept here while a rebuilt forward is open. Export learned them from the original in an
order the graph does not keep: it places, after the node reading a size, first the range it ended with (``u3 >=
16``, ``u3 <= 16``) and then the assertions it was given, though the range is what it concluded from those
assertions (``Eq(u3, u2)``, then the opaque leaf's ``Eq(u3, 16)``). A range narrowed to one value replaces the
symbol by that value at once, so checking ``u3 <= 16`` first would turn the later ``Eq(u3, u2)`` into ``Eq(16,
u2)`` and export would place other assertions. So the kept checks run the given assertions first, in order, and
the bounds of one symbol by a number (``u >= c``, ``u <= c``) after them: every check still runs, each exactly
once; only the order in which export learns them changes. Outside export, and outside a rebuilt forward, a check
runs where it stands.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch

_LOCAL = threading.local()


def open_checks() -> int:
    """Open a forward's scope: where its kept checks start (a forward inside it keeps and checks its own after)."""
    pending = getattr(_LOCAL, "pending", None)
    if pending is None:
        pending = _LOCAL.pending = []
    _LOCAL.depth = getattr(_LOCAL, "depth", 0) + 1
    return len(pending)


def keeping() -> bool:
    """Whether a check made now is kept for the end of a rebuilt forward (one is open, and export traces it)."""
    return getattr(_LOCAL, "depth", 0) > 0 and torch.compiler.is_exporting()


def keep(cond: Any, message: str | Callable[[], str]) -> bool:
    """Keep ``cond`` (a :class:`torch.SymBool`) for :func:`close_checks` when :func:`keeping`; whether it was kept."""
    if not (isinstance(cond, torch.SymBool) and keeping()):
        return False
    _LOCAL.pending.append((cond, message))
    return True


def close_checks(start: int) -> None:
    """Close the scope :func:`open_checks` opened at ``start``: check what it kept, given assertions first and the
    bounds of one symbol after them."""
    _LOCAL.depth = max(getattr(_LOCAL, "depth", 1) - 1, 0)
    pending = getattr(_LOCAL, "pending", None)
    if not pending or len(pending) <= start:
        return
    mine = pending[start:]
    del pending[start:]
    mine = [(_plain(cond), message) for cond, message in mine]
    bounds = [_is_bound(cond) for cond, _ in mine]
    known = _Known()
    for bound in (False, True):
        for (cond, message), is_bound in zip(mine, bounds, strict=True):
            if is_bound is bound and not known.holds(cond):
                torch._check(cond, message if callable(message) else (lambda message=message: message))
                known = _Known()  # what it taught export


def _plain(cond: Any) -> Any:
    """``cond`` with each ``Piecewise((1, Eq(u, 1)), (0, True))`` written ``u``: a rebuilt graph's ``sym_ite(b, 1,
    0)`` of a boolean read from data ``b`` (``Eq(u, 1)``, ``u`` in [0, 1]) is how export wrote the symbol ``u``
    itself, and the two are equal for every value ``u`` can take."""
    import sympy
    from torch.fx.experimental.sym_node import SymNode
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    node = cond.node
    shape_env, expr = getattr(node, "shape_env", None), getattr(node, "_expr", None)
    if shape_env is None or not isinstance(expr, sympy.Basic) or not expr.has(sympy.Piecewise):
        return cond
    mapping = {}
    for piece in expr.atoms(sympy.Piecewise):
        if len(piece.args) != 2 or piece.args[1] != (0, sympy.true) or piece.args[0][0] != 1:
            continue
        test = piece.args[0][1]
        if not isinstance(test, sympy.Eq) or test.rhs != 1 or not isinstance(test.lhs, sympy.Symbol):
            continue
        symbol = test.lhs
        vr = shape_env.var_to_range.get(symbol)
        if symbol in free_unbacked_symbols(symbol) and vr is not None and vr.lower >= 0 and vr.upper <= 1:
            mapping[piece] = symbol
    if not mapping:
        return cond
    return torch.SymBool(SymNode(expr.xreplace(mapping), shape_env, bool, None))


class _Known:
    """What export already holds: the runtime assertions it recorded and what they imply (its ``axioms``), as
    recorded and with the sizes replaced by what export learned since (``Eq(u0, u1)`` holds ``Eq(16, u1)`` once
    ``u0`` is 16)."""

    def __init__(self) -> None:
        self._replaced: dict[int, dict[Any, Any]] = {}

    def holds(self, cond: Any) -> bool:
        """Whether ``cond``, as stated when it was made (before the sizes it names were replaced), is held."""
        import sympy
        from torch.fx.experimental.symbolic_shapes import canonicalize_bool_expr

        node = cond.node
        shape_env, expr = getattr(node, "shape_env", None), getattr(node, "_expr", None)
        if shape_env is None or not isinstance(expr, sympy.Basic) or expr in (sympy.true, sympy.false):
            return False
        axioms = shape_env.axioms
        if axioms.get(canonicalize_bool_expr(expr)) == sympy.true:
            return True
        replaced = self._replaced.get(id(shape_env))
        if replaced is None:
            replaced = self._replaced[id(shape_env)] = {
                canonicalize_bool_expr(shape_env.replace(k)): v for k, v in axioms.items() if v == sympy.true}
        return replaced.get(canonicalize_bool_expr(shape_env.replace(expr))) == sympy.true


@contextlib.contextmanager
def fresh() -> Iterator[None]:
    """No scope open within the block (an export of its own: a forward an earlier export left by raising does not
    keep this one's checks), as before it afterwards."""
    saved = getattr(_LOCAL, "pending", None), getattr(_LOCAL, "depth", 0)
    _LOCAL.pending, _LOCAL.depth = [], 0
    try:
        yield
    finally:
        _LOCAL.pending, _LOCAL.depth = saved


def _is_bound(cond: Any) -> bool:
    """Whether ``cond`` bounds one symbol by a number (``u0 >= 16``): a range export derived, checked last."""
    import sympy

    expr = cond.node.expr
    if not isinstance(expr, (sympy.Ge, sympy.Gt, sympy.Le, sympy.Lt)):
        return False
    sides = (expr.lhs, expr.rhs)
    return any(isinstance(s, sympy.Symbol) for s in sides) and any(s.is_number for s in sides)


__all__ = ["close_checks", "fresh", "keep", "keeping", "open_checks"]

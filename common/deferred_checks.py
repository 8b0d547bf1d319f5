"""Runtime checks on sizes and values read from data, kept aside while ``torch.export`` traces a rebuilt forward and
checked when that forward ends, so that export learns from the rebuild what it learned from the original.

Kept here while a rebuilt forward is open (:func:`open_checks`, :func:`close_checks`): its graph's
``aten._assert_scalar`` nodes (:mod:`ir2torch.codegen.deferred_asserts`, whose docstring says why at the end) and
the assertion an opaque leaf's stand-in makes on an input size computed from data (:mod:`torch2ir.opaque.same_call`,
when a rebuild is converted again). When the forward ends, each kept check is given to export (``torch._check``)
in the graph's order, except:

- one export already holds: a runtime assertion it recorded, or one those imply (its ``axioms``), as the check was
  stated when it was made or with the sizes export has since replaced by a value. The rebuild's ops teach export
  what the original's did (a broadcast of two sizes read from data records ``Eq(u3, u2)``, then one against the
  opaque leaf's outputs ``Eq(u3, 16)``, replacing ``u3`` by 16); given again, ``Eq(u3, u2)`` reached export as
  ``Eq(16, u2)``, a new assertion narrowing ``u2`` to 16, and export placed other assertions than the original's.
  Export's graph asserts what it holds, so nothing is checked less;
- ``Piecewise((1, Eq(u, 1)), (0, True))``, what the rebuild computes for the graph's ``sym_ite(b, 1, 0)`` of a
  boolean ``b`` read from data (``Eq(u, 1)``, ``u`` in [0, 1]): that node is how export wrote the symbol ``u``, and
  the check is given with ``u`` in its place (equal for both values ``u`` can take), as export learned it;
- the bounds of one symbol by a number (``u >= c``, ``u <= c``) come after the other checks: export places the
  range it ended with first, though it concluded that range from the others (``Eq(u1, 1)`` of a ``torch._check``
  on a boolean read from data); checked first, a range narrowed to one value replaces the symbol at once and the
  equality is never recorded.

Outside export, and outside a rebuilt forward, a check runs where it stands.
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
    mine = [(_guarded(_plain, cond, cond), message) for cond, message in mine]
    bounds = [_guarded(_is_bound, cond, False) for cond, _ in mine]
    known = _Known()
    for bound in (False, True):
        for (cond, message), is_bound in zip(mine, bounds, strict=True):
            if is_bound is bound and not _guarded(known.holds, cond, False):
                torch._check(cond, message if callable(message) else (lambda message=message: message))
                known = _Known()  # what it taught export


def _guarded(read: Callable[[Any], Any], cond: Any, default: Any) -> Any:
    """``read(cond)``, or ``default`` when torch's symbolic internals it reads are not there (another torch
    release): the check is then given as it stands, in graph order, as before."""
    try:
        return read(cond)
    except (AttributeError, TypeError, ImportError):
        return default


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

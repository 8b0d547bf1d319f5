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
        """Whether ``cond``, as stated when it was made (before the sizes it names were replaced), is held; also as
        ``Mod`` where it computes a ``PythonMod`` of a number that cannot be negative by one that is positive
        (:func:`_as_mod`)."""
        import sympy

        node = cond.node
        shape_env, expr = getattr(node, "shape_env", None), getattr(node, "_expr", None)
        if shape_env is None or not isinstance(expr, sympy.Basic) or expr in (sympy.true, sympy.false):
            return False
        return any(self._holds(shape_env, e) for e in dict.fromkeys([expr, _as_mod(shape_env, expr)]))

    def _holds(self, shape_env: Any, expr: Any) -> bool:
        import sympy
        from torch.fx.experimental.symbolic_shapes import canonicalize_bool_expr

        axioms = shape_env.axioms
        if axioms.get(canonicalize_bool_expr(expr)) == sympy.true:
            return True
        replaced = self._replaced.get(id(shape_env))
        if replaced is None:
            replaced = self._replaced[id(shape_env)] = {
                canonicalize_bool_expr(shape_env.replace(k)): v for k, v in axioms.items() if v == sympy.true}
        return replaced.get(canonicalize_bool_expr(shape_env.replace(expr))) == sympy.true


def _as_mod(shape_env: Any, expr: Any) -> Any:
    """``expr`` with each ``PythonMod(p, q)`` whose ``p`` cannot be negative and ``q`` is positive (by export's
    ranges) written as torch's ``Mod(p, q)``, the same number there: a rebuilt graph computes ``512 % (32 * u2 *
    u3)`` with Python's ``%`` (``PythonMod``) where export learned ``Mod`` from torch's own view check (HY-V4-VL's
    patch merger), the same condition."""
    from torch.utils._sympy.functions import Mod, PythonMod
    from torch.utils._sympy.value_ranges import bound_sympy

    def mod(p: Any, q: Any) -> Any:
        ranges = {s: shape_env.var_to_range[s] for s in (p.free_symbols | q.free_symbols)
                  if s in shape_env.var_to_range}
        if bound_sympy(p, ranges).lower >= 0 and bound_sympy(q, ranges).lower > 0:
            return Mod(p, q)
        return PythonMod(p, q)

    return expr.replace(PythonMod, mod) if expr.has(PythonMod) else expr


@contextlib.contextmanager
def fresh() -> Iterator[None]:
    """No scope open within the block (an export of its own: a forward an earlier export left by raising does not
    keep this one's checks), as before it afterwards; while it runs, an op's new assertion that the kept bounds
    imply has them given first (:func:`_implied_first`)."""
    saved = getattr(_LOCAL, "pending", None), getattr(_LOCAL, "depth", 0)
    _LOCAL.pending, _LOCAL.depth = [], 0
    try:
        with _implied_first():
            yield
    finally:
        _LOCAL.pending, _LOCAL.depth = saved


@contextlib.contextmanager
def _implied_first() -> Iterator[None]:
    """While an op of a rebuilt forward makes export assert something new (``torch._check`` of a convolution's
    input sizes: ``(2 <= u5) & (2 <= u6)``, no equation) that the bounds kept for the end of an open forward imply
    (``1 < u5``, ``1 < u6``, from a ``torch._check`` of the original's code that a graph only asserts; not the
    ranges ``u >= c``, ``u <= c`` export concluded, see :func:`_bound`), and that is not itself a kept check: the
    original knew those bounds before that op (it runs the same op, and its graph does not assert the op's
    condition), so they are given to export first, in order, until the condition holds (export then records nothing
    for the op, as for the original). Only on the thread of the open forward; another torch release without that
    method of ``ShapeEnv``: nothing changes."""
    try:
        from torch.fx.experimental.symbolic_shapes import ShapeEnv
        original = ShapeEnv.guard_or_defer_runtime_assert
    except (ImportError, AttributeError):
        yield
        return

    def guard_or_defer_runtime_assert(self: Any, orig_expr: Any, msg: Any, fx_node: Any = None) -> Any:
        if keeping() and _LOCAL.pending and not getattr(_LOCAL, "flushing", False):
            _LOCAL.flushing = True
            try:
                _guarded(lambda expr: _give_implying(self, expr), orig_expr, None)
            finally:
                _LOCAL.flushing = False
        return original(self, orig_expr, msg, fx_node)

    ShapeEnv.guard_or_defer_runtime_assert = guard_or_defer_runtime_assert  # type: ignore[method-assign]
    try:
        yield
    finally:
        ShapeEnv.guard_or_defer_runtime_assert = original  # type: ignore[method-assign]


def _give_implying(shape_env: Any, expr: Any) -> None:
    """Give the kept bounds on the symbols of ``expr`` to export, in order, until ``expr`` holds, when together
    they imply it, it does not hold yet and it is not itself a kept check (see :func:`_implied_first`)."""
    import sympy
    from torch.fx.experimental.symbolic_shapes import canonicalize_bool_expr
    from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy

    if not isinstance(expr, sympy.Basic) or not expr.free_symbols or expr.has(sympy.Eq, sympy.Ne) or \
            shape_env._maybe_evaluate_static(expr) is not None:
        return  # an equation replaces sizes: export learns those from the ops, as from the original
    target = canonicalize_bool_expr(expr)
    kept = [(i, _plain(cond)) for i, (cond, _) in enumerate(_LOCAL.pending)
            if getattr(cond.node, "shape_env", None) is shape_env]
    if any(canonicalize_bool_expr(cond.node.expr) == target for _, cond in kept):
        return  # the op states a kept check itself: export learns it from the op, as from the original
    bounds = [(i, cond, _bound(cond.node.expr)) for i, cond in kept if cond.node.expr.free_symbols & expr.free_symbols]
    bounds = [(i, cond, b) for i, cond, b in bounds if b is not None]
    ranges = {s: shape_env.var_to_range.get(s, ValueRanges.unknown_int()) for s in expr.free_symbols}
    for _, _, (symbol, lower, upper) in bounds:
        ranges[symbol] = ranges[symbol] & ValueRanges(lower, upper)
    implied = bound_sympy(expr, ranges)
    if not (implied.is_singleton() and implied.lower == sympy.true):
        return
    given = []
    for index, cond, _ in bounds:
        if shape_env._maybe_evaluate_static(expr) is not None:
            break
        given.append(index)
        if not _Known().holds(cond):
            torch._check(cond, lambda cond=cond: f"{cond} (kept: implies an op's check)")
    for index in reversed(given):
        del _LOCAL.pending[index]


def _bound(expr: Any) -> tuple[Any, Any, Any] | None:
    """``(symbol, lower, upper)`` of an inequality bounding one integer symbol by a number (``1 < u5``: ``(u5, 2,
    oo)``), else None; also None for ``u >= c`` and ``u <= c``, the range export placed in its graph: what it
    concluded at the end (from the ops too), not what it knew before a given op."""
    import sympy
    from torch.utils._sympy.numbers import int_oo

    if not isinstance(expr, (sympy.Ge, sympy.Gt, sympy.Le, sympy.Lt)):
        return None
    lhs, rhs = expr.lhs, expr.rhs
    if isinstance(expr, (sympy.Ge, sympy.Le)) and isinstance(lhs, sympy.Symbol) and rhs.is_number:
        return None
    if isinstance(rhs, sympy.Symbol) and lhs.is_number:
        expr = expr.reversed
        lhs, rhs = expr.lhs, expr.rhs
    if not (isinstance(lhs, sympy.Symbol) and rhs.is_Integer and lhs.is_integer):
        return None
    c = int(rhs)
    return {sympy.Ge: (lhs, c, int_oo), sympy.Gt: (lhs, c + 1, int_oo), sympy.Le: (lhs, -int_oo, c),
            sympy.Lt: (lhs, -int_oo, c - 1)}[type(expr)]


def _is_bound(cond: Any) -> bool:
    """Whether ``cond`` bounds one symbol by a number (``u0 >= 16``): a range export derived, checked last."""
    import sympy

    expr = cond.node.expr
    if not isinstance(expr, (sympy.Ge, sympy.Gt, sympy.Le, sympy.Lt)):
        return False
    sides = (expr.lhs, expr.rhs)
    return any(isinstance(s, sympy.Symbol) for s in sides) and any(s.is_number for s in sides)


__all__ = ["close_checks", "fresh", "keep", "keeping", "open_checks"]

"""A rebuilt graph's runtime assertions (``aten._assert_scalar``) while ``torch.export`` traces it: checked at the
end of the forward, as export checked them when it traced the original.

torch.export inserts an ``_assert_scalar`` for each range it learns about a size read from data (``u0 >= 0``, a
split's ``Eq(u0, 16)``) right after the node that reads it, though it learned the range *later*, from the ops
using the size. Traced again in that order, a rebuilt graph hands export the assertion first: export then
replaces the size by the value it asserts before the ops that used it symbolically run (``split_with_sizes(x,
[16])`` instead of ``[item]``) and inserts its own assertions beside the copies, so converting a rebuild again
gives another graph. Here each such assertion of a :class:`torch.SymBool`, while exporting, is kept aside and
checked with ``torch._check`` when the graph's forward ends: export learns what it learned from the original,
in the same order, and places the same assertions (:mod:`common.deferred_checks` says which of them it is given
again, and in what order). Outside export (eager, ``torch.compile``, fx tracing) the
operator runs where it stands, as before.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx

from common import deferred_checks

_ASSERT = torch.ops.aten._assert_scalar.default


def open_asserts() -> int:
    """Where this forward's kept assertions start (a forward inside it keeps and checks its own after them)."""
    return deferred_checks.open_checks()


def assert_scalar(cond: Any, message: str) -> None:
    """``aten._assert_scalar(cond, message)``, or, for a symbolic ``cond`` while exporting, kept for
    :func:`close_asserts`."""
    if deferred_checks.keep(cond, message):
        return None
    return _ASSERT(cond, message)


def close_asserts(start: int) -> None:
    """Check the assertions this forward kept aside (none outside export), as
    :func:`common.deferred_checks.close_checks` does."""
    deferred_checks.close_checks(start)


def defer_asserts(graph: fx.Graph) -> None:
    """Make ``graph``'s ``_assert_scalar`` nodes call :func:`assert_scalar`, and check the kept ones before its
    output (nothing changes for a graph without any)."""
    nodes = [n for n in graph.nodes if n.op == "call_function" and getattr(n.target, "overload", n.target) is _ASSERT]
    if not nodes:
        return
    for node in nodes:
        node.target = assert_scalar
    first = next(n for n in graph.nodes if n.op != "placeholder")
    with graph.inserting_before(first):
        start = graph.call_function(open_asserts, ())
    output = next(n for n in reversed(graph.nodes) if n.op == "output")
    with graph.inserting_before(output):
        graph.call_function(close_asserts, (start,))


__all__ = ["assert_scalar", "close_asserts", "defer_asserts", "open_asserts"]

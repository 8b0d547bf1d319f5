"""A canonical order for runs of symbolic-scalar nodes (``u0 + 4``, ``Eq(u0, 1)``, runtime assertions).

torch.export inserts its runtime assertions (``aten._assert_scalar``) after the node that binds their symbols, in
the order its ``ShapeEnv`` learned them, and keeps an assertion already in the traced code where the code made it
unless it was learned too. That order is the traced code's, not the computation's: a rebuilt module runs the IR's
assertions in the IR's order, so a fact export first learned late (``0 <= u0``) is checked first, an assertion it
implies (``0 <= u0 + 4``) is no longer learned and stays where the rebuilt code has it, and the graph converts
back with the same nodes in another order (diffusers' ``Lumina2RotaryPosEmbed``: its ``tolist()`` of a mask sum).

These nodes are pure: integer and boolean arithmetic on symbolic values and checks of it, no tensor read or
written. So within each run of consecutive such nodes the IR holds them in an order that depends on the nodes
alone: the assertions one after the other, single-symbol bounds (``0 <= u0``) first as export checks them, then by
their condition's expression, each right after the nodes computing its condition; values no assertion reads after
them, by expression. A rebuilt module then checks the bounds first, as export did, and an assertion that export
finds implied by them stays where this order puts it, which converting it again finds the same. Reordering them
changes at most which of several failing checks reports first; every value is still computed after the values it
reads.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any

import torch
from torch import fx

_ASSERTIONS = (torch.ops.aten._assert_scalar.default,)
_SYMBOLIC = (torch.SymInt, torch.SymBool, torch.SymFloat)

#: The name base an assertion gets in the IR, whether export inserted it (``_assert_scalar_default``) or traced
#: it from the code (``_assert_scalar``): the same check is one node name whichever made it.
ASSERT_NAME = "_assert_scalar_default"


def is_assertion(node: fx.Node) -> bool:
    return node.op == "call_function" and node.target in _ASSERTIONS


def _symbolic(node: Any) -> bool:
    """Whether ``node`` is a call whose inputs and result are symbolic scalars or plain values (an assertion:
    ``None``), never a tensor: ``item()`` and ``sym_size`` read tensors and bound a run."""
    if not isinstance(node, fx.Node) or node.op != "call_function":
        return False
    if not is_assertion(node) and not isinstance(node.meta.get("val"), _SYMBOLIC):
        return False
    return all(isinstance(arg.meta.get("val"), _SYMBOLIC) for arg in node.all_input_nodes)


def _assert_key(node: fx.Node) -> tuple[int, str]:
    """A single-symbol bound (``u0 >= 0``) first, as export checks it first (from the symbol's value range); then
    the other assertions by their condition's expression."""
    cond = node.args[0] if node.args else None
    val = cond.meta.get("val") if isinstance(cond, fx.Node) else cond
    return (0 if _is_bound(val) else 1, _expr(val))


def _is_bound(val: Any) -> bool:
    expr = getattr(getattr(val, "node", None), "expr", None)
    if expr is None or not getattr(expr, "is_Relational", False) or len(expr.free_symbols) != 1:
        return False
    lhs, rhs = expr.args
    return (lhs.is_Symbol and rhs.is_Number) or (rhs.is_Symbol and lhs.is_Number)


def _expr(val: Any) -> str:
    node = getattr(val, "node", None)
    return str(getattr(node, "expr", val))


def _canonical_run(run: list[fx.Node]) -> list[fx.Node]:
    """A topological order of ``run``: each node ranked by the first assertion it feeds (a node feeding none after
    all of them), ties by its own value's expression, so that each assertion follows its condition at once."""
    inside = set(run)
    rank: dict[fx.Node, tuple[int, str]] = {}
    for node in reversed(run):  # users come later in a run
        ranks = [rank[user] for user in node.users if user in inside]
        if is_assertion(node):
            ranks.append(_assert_key(node))
        rank[node] = min(ranks, default=(2, ""))
    position = {node: i for i, node in enumerate(run)}

    def key(node: fx.Node) -> tuple[Any, ...]:
        return (rank[node], 1 if is_assertion(node) else 0, _expr(node.meta.get("val")),
                str(getattr(node.target, "__name__", node.target)), position[node])

    waiting = {node: sum(1 for arg in node.all_input_nodes if arg in inside) for node in run}
    ready = [(key(node), node) for node in run if not waiting[node]]
    heapq.heapify(ready)
    order: list[fx.Node] = []
    while ready:
        _, node = heapq.heappop(ready)
        order.append(node)
        for user in node.users:
            if user in inside:
                waiting[user] -= 1
                if not waiting[user]:
                    heapq.heappush(ready, (key(user), user))
    return order if len(order) == len(run) else run  # (a cycle cannot happen in an fx graph)


def canonical_items(items: Sequence[Any]) -> list[Any]:
    """``items`` (fx nodes and child frames, in the order export traced them) with each run of consecutive
    symbolic-scalar nodes in its canonical order."""
    out: list[Any] = []
    run: list[fx.Node] = []
    for item in items:
        if _symbolic(item):
            run.append(item)
            continue
        if run:
            out += _canonical_run(run)
            run = []
        out.append(item)
    if run:
        out += _canonical_run(run)
    return out


def canonical_positions(items_of: Sequence[Sequence[Any]], position: dict[fx.Node, int]) -> dict[fx.Node, tuple]:
    """A sort key for the nodes of the frames whose items are ``items_of``: export's ``position``, but each node
    of a run of symbolic-scalar nodes at the run's first position and its place in :func:`canonical_items`' order
    (a module returning several numbers computed in one run returns them in the order its graph computes them,
    which converting the rebuild finds again)."""
    key = {node: (i, 0) for node, i in position.items()}
    for items in items_of:
        run: list[fx.Node] = []
        for item in [*items, None]:
            if item is not None and _symbolic(item):
                run.append(item)
                continue
            if run:
                first = min(position[n] for n in run)
                key.update((node, (first, k)) for k, node in enumerate(_canonical_run(run)))
                run = []
    return key


__all__ = ["ASSERT_NAME", "canonical_items", "canonical_positions", "is_assertion"]

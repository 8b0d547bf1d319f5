"""Index bounds proven from the graph: the run-time bound check an ``index`` / ``index_put`` node may skip (issue 52).

:mod:`ir2torch.run_safety.index_checks` reads every integer index of ``aten.index.Tensor`` and ``aten.index_put``
before the kernel runs (a copy to Python numbers, about 5 us and three ATen ops). Some indices are in range by
construction: transformers' mixture-of-experts layers index with the ``sort`` indices of the flattened routing
(``sort``, ``// top_k``, and an inverse permutation built with ``index_put_``), which a decoding step of Mixtral
checks 16 times. When the code is generated (:func:`~ir2torch.run_safety.node_checks.checked_target`),
:func:`proven_indices` reads, from the graph alone, which index tensors of a node have values in
``0 .. (index.size(dim) - 1) // divisor``: a bound on the index's *own* shape. At each call,
:func:`check_proven` compares that number (shapes only, no data read) with the size of the dimension the index
indexes; when it is below, the values cannot be out of range and are not read; otherwise (and for every index not
proven) the values are read and checked as before. So a proof never turns a check off: it replaces reading the
values by comparing two sizes, for the calls where that comparison settles it.

The proof rules (a node's value is "bounded by ``(dim, divisor)``": every element in
``0 .. (value.size(dim) - 1) // divisor``):

1. ``operator.getitem(aten.sort(x, dim, ...), 1)`` and ``aten.argsort(x, dim, ...)`` (``default`` and ``stable``
   overloads), ``dim`` a Python ``int`` (default ``-1``): bounded by ``(dim, 1)``. The indices of a sort along
   ``dim`` are positions along ``dim`` and have ``x``'s shape (ATen's kernels; the sort raises for an invalid
   ``dim``). The sort's tuple is read only by ``getitem`` 0 or 1, and every ``getitem`` 1 of it is held to the
   rule below on writes (they are one tensor).
2. ``aten.floor_divide(a, c)`` (``default`` and ``Scalar``) of a value ``a`` bounded by ``(dim, k)``, ``c`` a
   Python ``int`` above 0 (not a bool, not a tensor): bounded by ``(dim, k * c)`` (non-negative values floor-divided
   by a positive number stay non-negative, and ``(n // k) // c == n // (k * c)``; the shape is ``a``'s).
3. ``aten.index_put_`` / ``aten.index_put`` (``default``, ``accumulate`` absent or ``False``) of
   ``(aten.empty_like(i), [i], aten.arange(end))`` where ``i`` is rule 1's indices of a sort of
   ``aten.reshape`` / ``aten.view`` to a one-element shape list (so ``i`` is one-dimensional, a permutation of
   ``0 .. n-1``), ``empty_like`` with no ``dtype`` (so ``i``'s int64; only ``pin_memory`` / ``memory_format``
   keywords) and ``arange`` with its end alone (only ``device`` / ``pin_memory`` / ``layout`` keywords): bounded by
   ``(0, 1)``. The permutation writes every element of the ``n`` of the result, and the kernel broadcasts the
   ``arange``'s ``m`` values to ``n`` positions only when ``m`` is 1 or ``n``, so every value is below ``n``.

and every node a proof rests on (the sort's indices, the quotients, the ``empty_like``, the ``arange``, the
``index_put``'s result) is used only by the graph's output and by ``call_function`` nodes of ATen overloads
(``aten`` namespace: a custom operator's kernel is Python) whose schemas write none of those arguments, except
rule 3's own ``index_put`` writing the ``empty_like``; a user whose result may alias its argument (its schema says
so: a view, ``reshape``, ``to``) is held to the same rule, transitively. A module call, a Python function (an
``operator.getitem`` of a tensor too), a higher-order operator, an ``out=`` or in-place op on any of them, and
anything else: no proof, the check stays.

Not proven (their checks stay; ``tests/security/test_index_provenance.py`` plants each and gets an ``IRError``):
``topk``'s indices (positions in a larger dimension than the index's own), anything added to, multiplied, cast
(``to``: a narrower dtype wraps) or clamped, an index that is a graph input or a constant of the file, ``arange``
outside rule 3, ``one_hot`` / ``where`` / ``nonzero`` results.

The proofs are made on each graph as its code is generated: a node's checked target copied into another graph
(the folded forward of :mod:`ir2torch.codegen.fold_cache`, a variant, both rewritten: constants, size reads, the
experts' product, the mask) is proved again on that graph, and keeps only what it proves
(:func:`ir2torch.run_safety.node_checks.checked_target`).
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch import fx

from ir2torch.run_safety.writes import writes_in_place

_aten = torch.ops.aten
_MASKS = (torch.bool, torch.uint8)  # index dtypes that are masks
#: The overloads whose indices :func:`proven_indices` reads (positional ``indices`` argument at 1).
INDEXING = frozenset({_aten.index.Tensor, _aten.index_put_.default, _aten.index_put.default})
_SORTS = {_aten.sort.default: True, _aten.sort.stable: True, _aten.argsort.default: False,
          _aten.argsort.stable: False}  # -> returns a (values, indices) tuple
_FLOOR_DIVIDE = frozenset({_aten.floor_divide.default, _aten.floor_divide.Scalar})
_PUTS = frozenset({_aten.index_put_.default, _aten.index_put.default})
_ONE_D = frozenset({_aten.reshape.default, _aten.view.default})
_EMPTY_LIKE_KWARGS = frozenset({"pin_memory", "memory_format"})
_ARANGE_KWARGS = frozenset({"device", "pin_memory", "layout"})

#: ``(dim, divisor)``: the values are within ``0 .. (value.size(dim) - 1) // divisor``.
Bound = tuple[int, int]


def _op(node: Any) -> Any:
    """The ATen overload ``node`` calls (through the rebuilder's wrappers), or None."""
    if not isinstance(node, fx.Node) or node.op != "call_function":
        return None
    target = getattr(node.target, "overload", node.target)
    return target if isinstance(target, torch._ops.OpOverload) else None


def _is_int(value: Any) -> bool:
    return type(value) is int


def _sort_dim(node: fx.Node) -> int | None:
    """The ``dim`` of a sort / argsort node (a Python int), None when it is not one."""
    if _op(node) in (_aten.sort.default, _aten.argsort.default) and len(node.args) > 1:
        dim = node.args[1]
    else:  # the stable overloads take it by keyword only
        dim = node.kwargs.get("dim", -1)
    return dim if _is_int(dim) else None


def _sort_indices(node: Any) -> fx.Node | None:
    """The sort / argsort node whose indices ``node`` is (rule 1), or None."""
    if not isinstance(node, fx.Node):
        return None
    if node.op == "call_function" and node.target is operator.getitem and len(node.args) == 2 \
            and _is_int(node.args[1]) and node.args[1] == 1 and _SORTS.get(_op(node.args[0])) is True:
        return node.args[0]
    return node if _SORTS.get(_op(node)) is False else None


def _one_dimensional(node: Any) -> bool:
    """``node`` is a reshape / view to a one-element shape list (one-dimensional, or the op raises)."""
    return _op(node) in _ONE_D and len(node.args) == 2 and not node.kwargs and \
        isinstance(node.args[1], (list, tuple)) and len(node.args[1]) == 1


def _permutation_inverse(node: fx.Node) -> fx.Node | None:
    """Rule 3's sort indices ``i`` of an ``index_put(empty_like(i), [i], arange(end))`` node, or None."""
    args = node.args
    accumulate = args[3] if len(args) > 3 else node.kwargs.get("accumulate", False)
    if len(args) < 3 or accumulate is not False or set(node.kwargs) - {"accumulate"}:
        return None
    target, indices, values = args[0], args[1], args[2]
    if not isinstance(indices, (list, tuple)) or len(indices) != 1:
        return None
    index = indices[0]
    sort = _sort_indices(index)
    if sort is None or _op(sort) not in (_aten.sort.default, _aten.sort.stable) or not sort.args \
            or not _one_dimensional(sort.args[0]) or _sort_dim(sort) is None:
        return None
    if _op(target) is not _aten.empty_like.default or target.args != (index,) or \
            set(target.kwargs) - _EMPTY_LIKE_KWARGS:
        return None
    if _op(values) is not _aten.arange.default or len(values.args) != 1 or set(values.kwargs) - _ARANGE_KWARGS:
        return None
    return index


def _bound(node: Any, chain: list[tuple[fx.Node, fx.Node | None]]) -> Bound | None:
    """``node``'s bound by rules 1-3, appending each node the proof rests on (with the one node allowed to write
    it) to ``chain``; None when no rule applies."""
    sort = _sort_indices(node)
    if sort is not None:
        dim = _sort_dim(sort)
        if dim is None:
            return None
        if sort is node:  # argsort: the indices themselves
            chain.append((node, None))
            return dim, 1
        for user in sort.users:  # every node of the tuple's indices is the same tensor: all are held to the rule
            if user.op != "call_function" or user.target is not operator.getitem or len(user.args) != 2 or \
                    not _is_int(user.args[1]) or user.args[1] not in (0, 1):
                return None
            if user.args[1] == 1:
                chain.append((user, None))
        return dim, 1
    op = _op(node)
    if op in _FLOOR_DIVIDE and len(node.args) == 2 and not node.kwargs:
        divisor = node.args[1]
        inner = _bound(node.args[0], chain) if _is_int(divisor) and divisor > 0 else None
        if inner is None:
            return None
        chain.append((node, None))
        return inner[0], inner[1] * divisor
    if op in _PUTS:
        index = _permutation_inverse(node)
        if index is None:
            return None
        chain += [(index, None), (node.args[0], node), (node.args[2], None), (node, None)]
        return 0, 1
    return None


def _writes(user: fx.Node, op: Any, node: fx.Node) -> bool:
    """Whether ``user`` (calling ``op``) passes ``node`` as an argument its schema marks as written (a list
    argument holding it counts; an argument that is neither positional nor a keyword of the schema does too)."""
    arguments = op._schema.arguments
    given = dict(zip((a.name for a in arguments), user.args, strict=False))
    given.update(user.kwargs)
    if set(given) - {a.name for a in arguments}:
        return True
    for argument in arguments:
        if argument.alias_info is not None and argument.alias_info.is_write:
            value = given.get(argument.name)
            if value is node or (isinstance(value, (list, tuple)) and any(v is node for v in value)):
                return True
    return False


def _unwritten(node: fx.Node, writer: fx.Node | None, seen: set[fx.Node]) -> bool:
    """No user of ``node`` (or of a value that may alias it) may write it, except ``writer``."""
    if node in seen:
        return True
    seen.add(node)
    for user in node.users:
        if user.op == "output" or user is writer:
            continue
        op = _op(user)
        if op is None or op.namespace != "aten" or (writes_in_place(op) and _writes(user, op, node)):
            return False
        if any(r.alias_info is not None for r in op._schema.returns) and not _unwritten(user, None, seen):
            return False
    return True


def bound_of(node: Any) -> Bound | None:
    """``node``'s bound (module docstring), or None when it is not proven."""
    chain: list[tuple[fx.Node, fx.Node | None]] = []
    bound = _bound(node, chain)
    if bound is None:
        return None
    for value, writer in chain:
        if not _unwritten(value, writer, set()):
            return None
    return bound


def proven_indices(node: fx.Node) -> tuple[tuple[int, int, int], ...]:
    """``(position, dim, divisor)`` of each index of an :data:`INDEXING` node whose values are proven within
    ``0 .. (index.size(dim) - 1) // divisor``; empty for any other node."""
    if _op(node) not in INDEXING or len(node.args) < 2 or not isinstance(node.args[1], (list, tuple)):
        return ()
    proofs = []
    for position, index in enumerate(node.args[1]):
        bound = bound_of(index) if isinstance(index, fx.Node) else None
        if bound is not None:
            proofs.append((position, *bound))
    return tuple(proofs)


def settled(index: Any, dim: int, divisor: int, size: int) -> bool:
    """Whether an index proven within ``0 .. (index.size(dim) - 1) // divisor`` is within a dimension of ``size``
    (from shapes alone; False whenever that does not settle it, and the values are then read)."""
    if type(index) is not torch.Tensor or index.dtype not in (torch.int64, torch.int32):
        return False
    rank = index.dim()
    if not -rank <= dim < rank:
        return False
    return (index.size(dim) - 1) // divisor < size


def check_proven(self: Any, indices: Any, proofs: tuple[tuple[int, int, int], ...],
                 check: Any) -> str | None:
    """The index precondition of ``self[indices]`` where the indices of ``proofs`` are settled by their shapes
    (:func:`settled`); any index that is not is read by ``check`` (the full precondition of the node)."""
    if not isinstance(self, torch.Tensor) or not isinstance(indices, (list, tuple)):
        return check()
    dim, rank = 0, self.dim()
    for position, index in enumerate(indices):
        if isinstance(index, torch.Tensor) and index.dtype in _MASKS:
            dim += index.dim()  # a k-dim mask covers k dims (a 0-dim one none)
            continue
        if index is not None and dim < rank:
            for proof in proofs:
                if proof[0] == position:
                    if not settled(index, proof[1], proof[2], self.size(dim)):
                        return check()
                    break
            else:
                return check()  # not proven: its values are read
        dim += 1
    return None


__all__ = ["INDEXING", "Bound", "bound_of", "check_proven", "proven_indices", "settled"]

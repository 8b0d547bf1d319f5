"""A rebuilt model never writes into its caller's tensors.

A file may name in-place and ``out=`` operators (``aten.add_``, ``aten.zeros.out``, ``aten.resize_``): real
graphs use them on their own intermediate values (``ReLU(inplace=True)``). Aimed at an input, they would resize
or overwrite the caller's tensor, memory the model does not own and the memory budget does not count. The
forward's probe (and a checked call, op by op) therefore refuses an operator that writes a tensor sharing storage
with one of the call's inputs, before it runs. In the real call that follows, each node of a generated graph calling
an operator that writes in place tests its real arguments against the storages of the outermost call's inputs
(:data:`CALLER`, set by :class:`~ir2torch.run_safety.forward_budget.ForwardBudget` for a model a graph of which
may write something other than its own values, :func:`foreign_writes`, read once from the graph by the operators'
schemas; :mod:`~ir2torch.run_safety.node_checks`): the real storages decide what aliases the caller's tensors, and
without a forward budget (``max_bytes=None, max_flops=None``) there is no probe at all.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import fx


class _Caller(threading.local):
    #: Storage keys of the tensors the caller passed to the outermost call of a model whose graphs write in place,
    #: while it runs on this thread (not in a probe or a checked run, whose dispatch modes test every op).
    inputs: set[Any] | None = None


CALLER = _Caller()


def written(func: Any, args: tuple, kwargs: dict[str, Any]) -> Iterator[tuple[str, torch.Tensor]]:
    """``(argument name, tensor)`` of each tensor argument ``func``'s schema marks as written (``self`` of an
    in-place op, ``out=``)."""
    for index, name, kwarg_only in _written_arguments(func):
        value = kwargs.get(name) if kwarg_only or index >= len(args) else args[index]
        for tensor in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(tensor, torch.Tensor):
                yield name, tensor


#: ``func`` -> ``(index, name, kwarg_only)`` of each argument its schema marks as written (read once per operator:
#: a schema's arguments are made as Python objects at each read).
_WRITTEN: dict[Any, tuple[tuple[int, str, bool], ...]] = {}


def _written_arguments(func: Any) -> tuple[tuple[int, str, bool], ...]:
    if type(func) is not _OVERLOAD:  # (only an overload is remembered: what compares equal to one may not be one)
        return _schema_written(func)
    found = _WRITTEN.get(func)
    if found is None:
        _WRITTEN[func] = found = _schema_written(func)
    return found


_OVERLOAD = torch._ops.OpOverload


def _schema_written(func: Any) -> tuple[tuple[int, str, bool], ...]:
    schema = getattr(func, "_schema", None)
    if schema is None:
        return ()
    return tuple((index, argument.name, bool(argument.kwarg_only)) for index, argument in enumerate(schema.arguments)
                 if argument.alias_info is not None and argument.alias_info.is_write)


#: ``func`` -> whether its schema writes an argument (every op of a checked call asks: read once per operator).
_WRITES: dict[Any, bool] = {}


def writes_in_place(func: Any) -> bool:
    """Whether ``func``'s schema marks an argument as written."""
    try:
        return _WRITES[func]
    except KeyError:
        pass
    except TypeError:  # unhashable
        return _schema_writes(func)
    _WRITES[func] = found = _schema_writes(func)
    return found


def _schema_writes(func: Any) -> bool:
    schema = getattr(func, "_schema", None)
    return schema is not None and any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


def caller_write(func: Any, args: tuple, kwargs: dict[str, Any], inputs: set[Any],
                 key: Callable[[torch.Tensor], Any]) -> str | None:
    """Why ``func`` may not run (it writes a tensor whose storage ``key`` is one of the call's ``inputs``), or
    ``None``."""
    if not inputs or not writes_in_place(func):
        return None
    for name, tensor in written(func, args, kwargs):
        if key(tensor) in inputs:
            return (f"{func} writes its argument {name!r} in place, which shares memory with an input of the call: "
                    "a rebuilt model never resizes or overwrites its caller's tensors")
    return None


def overload_of(node: fx.Node) -> torch._ops.OpOverload | None:
    """The ``OpOverload`` a ``call_function`` node runs (through a ``DirectOp`` or ``CheckedCall`` too), else
    ``None``."""
    if node.op != "call_function":
        return None
    target = getattr(node.target, "overload", node.target)
    return target if isinstance(target, torch._ops.OpOverload) else None


def _arguments(node: fx.Node, op: torch._ops.OpOverload) -> list[tuple[Any, Any]]:
    """``(schema argument, value)`` of each argument ``node`` passes (positionally in schema order, or by name)."""
    schema = op._schema.arguments
    by_name = {a.name: a for a in schema}
    return [*zip(schema, node.args), *((by_name[k], v) for k, v in node.kwargs.items() if k in by_name)]


def _nodes(value: Any) -> list[fx.Node]:
    if isinstance(value, fx.Node):
        return [value]
    if isinstance(value, (list, tuple)):
        return [n for v in value for n in _nodes(v)]
    return []


def foreign_writes(graph: fx.Graph) -> list[fx.Node]:
    """The nodes of ``graph`` that write in place (or ``out=``) a tensor that may not be the graph's own: one whose
    storage is not, by the schemas' alias annotations, a fresh result of an operator of the graph (through views,
    in-place results and ``getitem`` of such results). An input, a parameter, buffer or attribute, a submodule's
    or any other function's result, or a view of one, may be the caller's; so may any argument of a write the
    schemas do not describe (a node calling no ``OpOverload``)."""
    fresh: dict[fx.Node, bool] = {}  # node -> whether its storage is a fresh result of an op of the graph
    found = []
    for node in graph.nodes:
        op = overload_of(node)
        if node.op == "call_function" and node.target is operator.getitem and isinstance(node.args[0], fx.Node):
            fresh[node] = fresh.get(node.args[0], False)
            continue
        if op is None:
            fresh[node] = False
            if node.op == "call_function" and writes_in_place(getattr(node.target, "overload", node.target)):
                found.append(node)
            continue
        returned = {s for r in op._schema.returns if r.alias_info is not None for s in r.alias_info.before_set}
        sources = [n for arg, value in _arguments(node, op) if arg.alias_info is not None
                   and returned & set(arg.alias_info.before_set) for n in _nodes(value)]
        fresh[node] = all(fresh.get(n, False) for n in sources) if returned else True
        if returned and not sources:
            fresh[node] = False  # an alias the arguments do not explain
        if writes_in_place(op) and any(not fresh.get(n, False) for arg, value in _arguments(node, op)
                                       if arg.alias_info is not None and arg.alias_info.is_write
                                       for n in _nodes(value)):
            found.append(node)
    return found


__all__ = ["CALLER", "caller_write", "foreign_writes", "overload_of", "writes_in_place", "written"]

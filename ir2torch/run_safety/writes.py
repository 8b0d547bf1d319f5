"""A rebuilt model never writes into its caller's tensors.

A file may name in-place and ``out=`` operators (``aten.add_``, ``aten.zeros.out``, ``aten.resize_``): real
graphs use them on their own intermediate values (``ReLU(inplace=True)``). Aimed at an input, they would resize
or overwrite the caller's tensor, memory the model does not own and the memory budget does not count. The
forward's probe (and a checked call, op by op) therefore refuses an operator that writes a tensor sharing storage
with one of the call's inputs, before it runs. In the real call that follows, each node of a generated graph calling
an operator that writes in place tests its real arguments against the storages of the outermost call's inputs
(:data:`CALLER`, set by :class:`~ir2torch.run_safety.forward_budget.ForwardBudget` for a model whose graphs write in
place; :mod:`~ir2torch.run_safety.node_checks`): the real storages decide what aliases the caller's tensors, and
without a forward budget (``max_bytes=None, max_flops=None``) there is no probe at all.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch


class _Caller(threading.local):
    #: Storage keys of the tensors the caller passed to the outermost call of a model whose graphs write in place,
    #: while it runs on this thread (not in a probe or a checked run, whose dispatch modes test every op).
    inputs: set[Any] | None = None


CALLER = _Caller()


def written(func: Any, args: tuple, kwargs: dict[str, Any]) -> Iterator[tuple[str, torch.Tensor]]:
    """``(argument name, tensor)`` of each tensor argument ``func``'s schema marks as written (``self`` of an
    in-place op, ``out=``)."""
    schema = getattr(func, "_schema", None)
    if schema is None:
        return
    for index, argument in enumerate(schema.arguments):
        info = argument.alias_info
        if info is None or not info.is_write:
            continue
        if argument.kwarg_only or index >= len(args):
            value = kwargs.get(argument.name)
        else:
            value = args[index]
        for tensor in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(tensor, torch.Tensor):
                yield argument.name, tensor


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


__all__ = ["CALLER", "caller_write", "writes_in_place", "written"]

"""Whether an opaque leaf is called while traced as it was in the eager call whose outputs its stand-in repeats.

A model can take another path under ``torch.export`` than in eager mode without reading any data (a branch on
``torch.compiler.is_exporting()``; transformers built its bidirectional attention mask only when exporting, until
:mod:`torch2ir.frontend.transformers_masks` made the trace skip it as eager mode does). The rebuilt model replays
the trace, so an opaque leaf whose traced call differs from its eager call would run its real forward on inputs
the original never gave it. Each call of an opaque leaf is therefore compared with the eager call of the same
index: the structure of its arguments (``None`` against a tensor included), each tensor's shape and dtype, each
plain value, each other object's type. A difference is an :class:`~torch2ir.frontend.export.OpaqueCallError`
naming the argument, which ``opaque="auto"`` answers by keeping the caller opaque instead, up the tree, until the
calls agree. A tensor size the trace computes from data (an unbacked symbol) cannot be compared while tracing:
it is asserted equal to the eager one in the graph instead (a rebuild on data giving another size raises); when the
leaf is called by a rebuilt forward (a rebuild converted again), the assertion is checked where that forward ends,
with the graph's own (:mod:`common.deferred_checks`), so export learns it after them as it did from the original."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch.utils import _pytree as pytree

from common import deferred_checks
from torch2ir.frontend.export import OpaqueCallError

_PLAIN = (bool, int, float, str, type(None))


def call_record(args: tuple, kwargs: Mapping[str, Any]) -> tuple[Any, list[tuple[Any, ...]]]:
    """What is compared of one call: its structure and, per leaf, a tensor's shape and dtype, a plain value, or
    another object's type."""
    leaves, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    return spec, [_leaf(x) for x in leaves]


def _leaf(x: Any) -> tuple[Any, ...]:
    if isinstance(x, torch.Tensor):
        from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

        with torch._C.DisableTorchFunction():  # a size computed from data is named, never read
            return ("tensor", tuple(str(s) if isinstance(s, torch.SymInt) and free_unbacked_symbols(s) else int(s)
                                    for s in x.shape), x.dtype)
    if isinstance(x, _PLAIN):
        return ("value", x)
    if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return ("symbolic", type(x).__name__)
    return ("object", type(x))


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    if a[0] == b[0] == "value" and isinstance(a[1], float) and isinstance(b[1], float):
        return a[1] == b[1] or (math.isnan(a[1]) and math.isnan(b[1]))
    return a[0] == b[0] and type(a[1]) is type(b[1]) and a[1] == b[1]


def _text(leaf: tuple[Any, ...]) -> str:
    if leaf[0] == "tensor":
        return f"a {str(leaf[2]).removeprefix('torch.')} tensor of shape {list(leaf[1])}"
    if leaf[0] == "value":
        return repr(leaf[1])
    if leaf[0] == "symbolic":
        return f"a {leaf[1]} (a value the trace computes)"
    return f"a {getattr(leaf[1], '__qualname__', leaf[1])}"


def difference(eager: tuple[Any, list[tuple[Any, ...]]], args: tuple, kwargs: Mapping[str, Any]) -> str | None:
    """How the traced call ``(args, kwargs)`` differs from the eager call's record (``None``: it does not)."""
    spec, leaves = eager
    values, traced_spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    if traced_spec != spec:
        return _structure(spec, traced_spec, args, kwargs)
    for i, (a, x) in enumerate(zip(leaves, values)):
        if a[0] == "tensor" and isinstance(x, torch.Tensor) and _same_tensor(a, x):
            continue
        b = _leaf(x)
        if not _same(a, b):
            return f"its argument {_argument(spec, i)} is {_text(b)} while traced, {_text(a)} in eager mode"
    return None


def _same_tensor(eager: tuple[Any, ...], x: torch.Tensor) -> bool:
    """Whether the traced tensor ``x`` has the eager call's dtype and shape. A size the trace computes from data
    (an unbacked symbol: Qwen3-VL's ``cu_seqlens``, as long as the images' patch grid has entries) cannot be read
    while tracing: it is asserted instead (``torch._check``, a runtime assertion in the graph), so a rebuild called
    on data giving another size raises rather than run the leaf on a call its eager outputs do not stand for."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    with torch._C.DisableTorchFunction():
        shape = tuple(x.shape)
        if x.dtype != eager[2] or len(shape) != len(eager[1]):
            return False
        for size, expected in zip(shape, eager[1], strict=True):
            if isinstance(size, torch.SymInt) and free_unbacked_symbols(size):
                cond, message = size == expected, _size_message(size, expected)
                if not deferred_checks.keep(cond, message):  # in a rebuilt forward: checked where it ends
                    torch._check(cond, message)
            elif int(size) != expected:
                return False
    return True


def _size_message(size: Any, expected: int) -> Any:
    return lambda: (f"an opaque leaf's input size {size} computed from data is not {expected}, as in the eager call "
                    "whose outputs stand in for it")


def _structure(spec: Any, traced_spec: Any, args: tuple, kwargs: Mapping[str, Any]) -> str:
    """The first argument whose structure differs (``attention_mask`` is None in eager mode, a tensor traced)."""
    try:
        eager_args, eager_kwargs = pytree.tree_unflatten([object()] * spec.num_leaves, spec)
    except Exception:  # noqa: BLE001 - then only say that the structure differs
        return "its arguments differ in structure from the eager call's"
    names = sorted(set(eager_kwargs) | set(kwargs))
    for name in names:
        if name not in eager_kwargs or name not in kwargs:
            where = "only while traced" if name in kwargs else "only in eager mode"
            return f"its keyword argument {name!r} is given {where}"
        if pytree.tree_structure(eager_kwargs[name]) != pytree.tree_structure(kwargs[name]):
            return (f"its argument {name!r} is {_shape_of(kwargs[name])} while traced, "
                    f"{_shape_of(eager_kwargs[name])} in eager mode")
    if len(eager_args) != len(args):
        return f"it is called with {len(args)} positional arguments while traced, {len(eager_args)} in eager mode"
    for i, (a, b) in enumerate(zip(eager_args, args)):
        if pytree.tree_structure(a) != pytree.tree_structure(b):
            return f"its positional argument {i} is {_shape_of(b)} while traced, {_shape_of(a)} in eager mode"
    return "its arguments differ in structure from the eager call's"


def _shape_of(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, torch.Tensor):
        return "a tensor"
    return f"a {type(value).__name__} of {pytree.tree_structure(value).num_leaves} values"


def _argument(spec: Any, index: int) -> str:
    """A name for leaf ``index`` of a call's structure: ``'attention_mask'``, ``0``, ``'past'[1]``."""
    try:
        args_spec, kwargs_spec = spec.children()
        offset = 0
        for label, child in [*enumerate(args_spec.children()),
                             *zip(kwargs_spec.context or [], kwargs_spec.children())]:
            if index < offset + child.num_leaves:
                inner = "" if child.num_leaves == 1 and child.is_leaf() else f" (leaf {index - offset})"
                return (f"{label!r}" if isinstance(label, str) else f"{label}") + inner
            offset += child.num_leaves
    except Exception:  # noqa: BLE001 - a structure without names
        pass
    return f"leaf {index}"


def refuse(path: str, index: int, why: str) -> OpaqueCallError:
    """The refusal of an opaque leaf's traced call that differs from its eager call."""
    error = OpaqueCallError(
        f"the opaque leaf {path} is called otherwise while traced than in eager mode: {why} (call {index + 1}; "
        "the model takes another path under torch.export, and the rebuild would run the leaf's forward on the "
        "traced call's inputs, not the eager call's whose outputs stand in for it)",
        implementation=path,
        hint="opaque=\"auto\" keeps its caller opaque instead, up the tree, until the calls agree")
    error.caller_reason = "it calls an opaque leaf otherwise while traced than in eager mode"
    error.leaves = (path,)
    return error


__all__ = ["call_record", "difference", "refuse"]

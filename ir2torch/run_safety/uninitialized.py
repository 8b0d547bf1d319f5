"""Uninitialized allocations a file names are zero-filled when they run.

``aten.empty`` and its kin return memory as the allocator found it: a tensor the process freed a moment ago (a
hostile file read 4088 of 4096 values of a just-freed tensor that way). Real models write every element of such a
tensor before reading it (transformers' MoE experts: ``inv_perm = torch.empty_like(perm); inv_perm[perm] = ...``),
so filling it with zeros first changes no result a model computes, and hands a file nothing it did not compute.

The fill happens on real tensors and in ``torch.compile``'s graphs; on fake or meta ones (``torch.export``, the
forward's memory probe, a rebuild on ``meta``) the call is the plain operator, so a rebuilt model converts back to
the same IR.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

_exporting = torch.compiler.is_exporting
_compiling = torch.compiler.is_compiling

#: The overloads that return uninitialized memory (as ``aten.<op>.<overload>``).
UNINITIALIZED: frozenset[str] = frozenset(
    f"aten.{op}.{overload}"
    for op, overloads in (("empty", ("memory_format", "out")), ("empty_like", ("default", "out")),
                          ("empty_strided", ("default", "out")), ("empty_permuted", ("default", "out")),
                          ("new_empty", ("default", "out")), ("new_empty_strided", ("default", "out")))
    for overload in overloads
)


def is_uninitialized(overload: Any) -> bool:
    """Whether ``overload`` (an ``OpOverload``) returns uninitialized memory."""
    return isinstance(overload, torch._ops.OpOverload) and overload.namespace == "aten" and \
        f"aten.{overload._opname}.{overload._overloadname}" in UNINITIALIZED


@functools.cache
def _fake_type() -> type:
    from torch._subclasses.fake_tensor import FakeTensor

    return FakeTensor


def zero_filled(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (an uninitialized allocation) whose real results are filled with zeros before they are returned."""

    def call(*args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        if type(out) is torch.Tensor and not out.requires_grad and not out.is_meta and not _exporting() and \
                not _compiling():
            out.zero_()  # a real plain tensor no tracer sees, nothing recorded for autograd: filled directly
            return out
        if not isinstance(out, torch.Tensor) or _exporting():
            return out  # export records the plain operator: the rebuild converts back to the same IR
        if _compiling() or (not isinstance(out, _fake_type()) and out.device.type != "meta"):
            with torch.no_grad():  # torch.compile traces the fill into its graph
                out.zero_()
        return out

    # generated code binds the wrapper itself: a name under ``torch`` would be spelled ``torch.ops...`` and
    # resolved back to the plain operator
    name = getattr(fn, "__name__", None) or str(fn)
    call.__name__ = call.__qualname__ = "zero_filled_" + "".join(c if c.isalnum() else "_" for c in name)
    call.__module__ = __name__
    call.__wrapped__ = fn  # type: ignore[attr-defined]
    return call


__all__ = ["UNINITIALIZED", "is_uninitialized", "zero_filled"]

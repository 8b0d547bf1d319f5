"""ATen overloads called through their C++ entry point from generated code (:class:`DirectOp`)."""

from __future__ import annotations

import functools
from typing import Any

import torch

from ir2torch.run_safety.fast_ops import fast_binding
from ir2torch.run_safety.uninitialized import is_uninitialized, zero_filled


class DirectOp(functools.partial):
    """An ATen overload called through its C++ entry point.

    ``OpOverload.__call__`` is one Python frame per op call (about 7% of a small model's forward time);
    ``functools.partial`` calls the entry point from C. ``overload`` is the ``OpOverload`` itself, and a
    ``DirectOp`` compares and hashes equal to it, so graph passes that match ``node.target ==
    torch.ops.aten.linear.default`` or look targets up in a dict keyed by overloads keep working (two DirectOps
    of one overload are equal only when they call the same function).
    Generated code spells it ``aten_linear_default(...)``.
    """

    overload: Any

    def __eq__(self, other: object) -> bool:
        # two DirectOps of one overload are equal only if they call the same thing: fx names a graph's globals by
        # object (a dict lookup), and a graph calling an overload both through its binding and as the overload
        # (other keywords, more positional arguments) must get two globals
        if isinstance(other, DirectOp):
            return self.overload is other.overload and self.func is other.func
        return self.overload is other

    def __hash__(self) -> int:
        return hash(self.overload)

    def __repr__(self) -> str:
        return f"DirectOp({self.overload})"


def direct_op(overload: Any, kwargs: dict[str, Any] | None = None, positional: int = 0) -> Any:
    """The :class:`DirectOp` of an ``OpOverload`` (anything else is returned as it is): through the Python binding
    that runs that overload (:mod:`ir2torch.run_safety.fast_ops`) when the call's keywords and positional argument count
    allow, else through the ``OpOverload`` itself.

    Both are forms ``torch.compile`` traces (``fullgraph=True`` works on a rebuilt model). The overload's boxed
    entry (``OpOverload._op``), one Python frame cheaper, is a builtin dynamo does not know: every op called
    through it was a graph break (9 on a rebuilt BERT). The corpus calls at most 13 such ops per forward
    (Llama's slices), about 0.7 us each more through the overload."""
    if isinstance(overload, torch._ops.OpOverload) and \
            fast_binding(overload, kwargs or {}, positional) is not None:
        return _direct_op(overload, True)
    return _direct_op(overload, False)


@functools.cache
def _direct_op(overload: Any, fast: bool) -> Any:
    if not isinstance(overload, torch._ops.OpOverload):
        return overload
    call = fast_binding(overload, {}) if fast else overload
    op = DirectOp(zero_filled(call) if is_uninitialized(overload) else call)
    op.overload = overload
    # fx names the global after ``__module__.__name__``; a module outside ``torch`` makes fx bind the object
    # itself (a name under ``torch`` would be spelled ``torch.ops...`` and resolved back to the slow overload)
    op.__module__ = overload.namespace
    op.__name__ = op.__qualname__ = f"{overload._opname}.{overload._overloadname}"
    return op


__all__ = ["DirectOp", "direct_op"]

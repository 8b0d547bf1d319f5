"""Tensor metadata of fx values as IR values (shape, dtype), symbolic dims as strings."""

from __future__ import annotations

from typing import Any

import torch

from common.errors import ConversionError


def dim(value: Any) -> int | str:
    """A concrete dimension as an int, a symbolic one as its expression string (``"s0"``)."""
    if isinstance(value, torch.SymInt):
        constant = value.node.maybe_as_int()
        return constant if constant is not None else str(value)
    return int(value)


def range_bound(value: Any) -> int | str:
    """A bound of a ``range_constraints`` entry: an int, or ``"int_oo"`` / ``"-int_oo"`` when unbounded.

    Export writes sympy integers and torch's own ``int_oo`` (which ``int()`` cannot convert: it raises
    ``AttributeError``), and at times sympy's ``oo``.

    Raises:
        ConversionError: a bound that is neither an integer nor infinite (never written by export so far).
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = str(value)
    if text.lstrip("-") in ("oo", "int_oo"):  # int_oo says is_finite (it is sympy's stand-in for "no bound")
        return "-int_oo" if text.startswith("-") else "int_oo"
    if getattr(value, "is_integer", False):
        return int(value)
    raise ConversionError(f"a dynamic size's range bound {str(value)[:80]!r} is neither an integer nor infinite",
                          hint="declare integer bounds with torch.export.Dim(..., min=, max=)")


#: What to do about a functorch transform inside a forward (see :func:`functorch_problem`).
FUNCTORCH_FIX = ("keep the transformed computation inside a leaf module (a handler or an override), or write it "
                 "batched without torch.vmap")


def functorch_problem(target: Any) -> str | None:
    """The problem to report for a graph node calling a functorch transform's runtime (``torch.vmap`` in a forward:
    export keeps ``_vmap_increment_nesting``, ``_add_batch_dim``...), or ``None`` for any other target. Those calls
    change the transform's process-wide nesting level; the IR does not carry them."""
    module = getattr(target, "__module__", None) or ""
    if not module.startswith("torch._functorch"):
        return None
    return ("torch.vmap (or another functorch transform) runs inside the forward: its batching calls "
            "(_vmap_increment_nesting, _add_batch_dim...) are not carried by the IR")


def value_meta(val: Any) -> Any:
    """IR metadata of an fx ``meta["val"]``: ``{"shape", "dtype"}`` per tensor, nested like the value."""
    if isinstance(val, torch.Tensor):
        return {"shape": [dim(s) for s in val.shape], "dtype": val.dtype}
    if isinstance(val, (list, tuple)):
        return [value_meta(v) for v in val]
    if isinstance(val, torch.SymInt | torch.SymFloat | torch.SymBool):
        return {"sym": str(val)}
    if val is None or isinstance(val, (bool, int, float)):
        return val
    return {"python": type(val).__name__}


def state_record(tensor: torch.Tensor, kind: str, **extra: Any) -> dict[str, Any]:
    """The IR state record of a parameter/buffer/constant."""
    rec: dict[str, Any] = {"kind": kind, "shape": [dim(s) for s in tensor.shape], "dtype": tensor.dtype}
    rec.update(extra)
    return rec

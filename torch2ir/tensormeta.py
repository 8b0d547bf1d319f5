"""Tensor metadata of fx values as IR values (shape, dtype), symbolic dims as strings."""

from __future__ import annotations

from typing import Any

import torch


def dim(value: Any) -> int | str:
    """A concrete dimension as an int, a symbolic one as its expression string (``"s0"``)."""
    if isinstance(value, torch.SymInt):
        constant = value.node.maybe_as_int()
        return constant if constant is not None else str(value)
    return int(value)


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

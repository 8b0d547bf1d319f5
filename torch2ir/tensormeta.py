"""Tensor metadata of fx values as IR values (shape, dtype), symbolic dims as strings."""

from __future__ import annotations

from typing import Any

import torch


def dim(value: Any) -> int | str:
    """A concrete dimension as an int, a symbolic one as its expression string."""
    if isinstance(value, int):
        return value
    try:
        return int(value)
    except (TypeError, ValueError, RuntimeError):
        return str(value)
    except Exception:  # noqa: BLE001 - unbacked symbols raise guard errors
        return str(value)


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

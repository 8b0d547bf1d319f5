"""How the registry sweep (:mod:`benchmarks.sweep`) compares a rebuild with eager and words a failure."""

from __future__ import annotations

from typing import Any

DIFFERS = "DIFFERS WITHOUT AN ERROR"


def first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return (text[0] if text else "")[:160].replace("|", "\\|")


def max_diff(got: Any, expected: Any) -> float:
    import torch
    import torch.utils._pytree as pytree

    a, _ = pytree.tree_flatten(got)
    b, _ = pytree.tree_flatten(expected)
    if len(a) != len(b):
        return float("inf")
    worst = 0.0
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype:
                return float("inf")
            if not torch.equal(x, y):
                diff = (x.double() - y.double()).abs().nan_to_num(float("inf"))
                worst = max(worst, diff.max().item() if diff.numel() else 0.0)
        elif x != y:
            return float("inf")
    return worst


__all__ = ["DIFFERS", "first_line", "max_diff"]

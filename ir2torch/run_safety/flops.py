"""The compute budget of a rebuilt model's call: floating-point operations counted on fake tensors before they run.

A file's memory can be bounded op by op, its compute cannot: a 1024x1024 kernel made in the graph and convolved
with a 2048x2048 input allocates a few megabytes and runs for minutes. The probe of a call
(:mod:`ir2torch.run_safety.forward_budget`) therefore also adds up the FLOPs of every operator that multiplies (matrix
products, convolutions, attention) with :mod:`torch.utils.flop_counter`'s formulas (and the CPU attention kernel's,
which that table lacks), and refuses the call once the total passes the budget, before any real op runs. A call
run checked op by op (sizes that depend on data) counts the same way, each op before it runs.

The budget (``ir2torch.convert(..., max_flops=...)``): ``"auto"`` (the default) is :data:`FLOPS_PER_PARAMETER`
per parameter and buffer element of the rebuilt model, at least :data:`MIN_FLOPS`; an int; or ``None`` (no
count). A transformer costs about two FLOPs per parameter per token, so ``"auto"`` lets a call process up to
32 768 tokens; a convolutional network costs more per parameter (a ResNet-50 at 224x224 about 330 per
parameter), so ``"auto"`` lets it see images of about 3 000x3 000.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

#: ``max_flops="auto"``: this many FLOPs per parameter and buffer element of the model, per call.
FLOPS_PER_PARAMETER = 2**16
#: ``max_flops="auto"``: never less than this (about a minute of one CPU core).
MIN_FLOPS = 10**12
AUTO = "auto"

FlopBudget = int | str | None


def _sdpa_cpu(query: Any, key: Any, value: Any, *args: Any, out_val: Any = None, **kwargs: Any) -> int:
    """``aten._scaled_dot_product_flash_attention_for_cpu``: two batched matrix products."""
    *batch, length, width = query.shape
    source, value_width = key.shape[-2], value.shape[-1]
    return 2 * math.prod(batch) * length * source * (width + value_width)


def _formulas() -> dict[Any, Any]:
    from torch.utils.flop_counter import flop_registry

    table = dict(flop_registry)
    table[torch.ops.aten._scaled_dot_product_flash_attention_for_cpu] = _sdpa_cpu
    return table


_TABLE: dict[Any, Any] | None = None


def _table() -> dict[Any, Any]:
    global _TABLE
    if _TABLE is None:
        _TABLE = _formulas()
    return _TABLE


def has_formula(func: Any) -> bool:
    """Whether ``func`` multiplies (its FLOPs are counted)."""
    return getattr(func, "overloadpacket", func) in _table()


def op_flops(func: Any, args: tuple, kwargs: dict[str, Any], out: Any) -> int:
    """The FLOPs of one call of ``func`` (0 for an operator without a formula: it does not multiply)."""
    formula = _table().get(getattr(func, "overloadpacket", func))
    if formula is None:
        return 0
    if formula is _sdpa_cpu:
        return _sdpa_cpu(*args, **kwargs)
    try:
        flops = formula(*args, **kwargs, out_val=out)
        # symbolic sizes (run_safety.symbolic_probe) stay an expression: int() would fix them to this call's values
        return flops if isinstance(flops, torch.SymInt) else int(flops)
    except Exception:  # noqa: BLE001 - a formula that does not fit the arguments: counted from the output
        return 0


def flop_limit(budget: FlopBudget, model: nn.Module) -> int | None:
    """The budget in FLOPs per call (``"auto"``: from the model's size, see the module docstring).

    Raises:
        ValueError: ``budget`` is neither ``"auto"``, ``None`` nor a non-negative int.
    """
    if budget is None:
        return None
    if budget == AUTO:
        elements = sum(t.numel() for t in {id(t): t for t in (*model.parameters(), *model.buffers())}.values())
        return max(MIN_FLOPS, FLOPS_PER_PARAMETER * elements)
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise ValueError(f'max_flops must be "auto", None or a non-negative int, not {budget!r}')
    return budget


def human_flops(n: int) -> str:
    for unit, size in (("PFLOP", 10**15), ("TFLOP", 10**12), ("GFLOP", 10**9), ("MFLOP", 10**6)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} FLOP"


__all__ = ["AUTO", "FLOPS_PER_PARAMETER", "FlopBudget", "MIN_FLOPS", "flop_limit", "has_formula", "human_flops",
           "op_flops"]

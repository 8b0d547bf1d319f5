"""The :class:`~common.errors.IRError` a forward budget raises (:mod:`ir2torch.run_safety.forward_budget`): the
memory or compute budget exceeded, or a write into the caller's tensors, named by implementation and node, with
what the user can do."""

from __future__ import annotations

from typing import Any

from common.errors import IRError, ResourceBudgetError, UnsafeTargetError
from ir2torch.run_safety.budget import human
from ir2torch.run_safety.flops import human_flops
from ir2torch.run_safety.op_modes import OverBudget


def budget_error(over: OverBudget, limit: int | None, budget: Any, checked: bool = False) -> IRError:
    """The ``IRError`` of ``over``; ``checked``: raised in a checked run (earlier ops ran, this one did not)."""
    if over.write:
        return UnsafeTargetError(f"{over.message}; nothing was written", implementation=over.implementation,
                                 node=over.node, hint="the file is corrupt or hostile: a converted model's graph "
                                 "writes in place only into its own intermediate values")
    if over.flops:
        return ResourceBudgetError(
            f"{over.message}, more than the compute budget of {human_flops(budget.flops or 0)} per call (max_flops); "
            "nothing was run", implementation=over.implementation, node=over.node,
            hint="if the model is trusted, raise the budget: ir2torch.convert(..., max_flops=<FLOPs>) (None "
                 "disables the count)")
    device = "cpu" if budget.device.type == "meta" else budget.device.type
    source = "max_bytes" if isinstance(budget.budget, int) else f"the memory available on {device}"
    done = "the operator was refused before it ran" if checked else "nothing was allocated"
    if over.unmeasured:
        return ResourceBudgetError(
            f"{over.message}; under a forward budget ({source}) it is refused: {done}",
            implementation=over.implementation, node=over.node,
            hint="if the model is trusted, run it without the forward budget: ir2torch.convert(..., max_bytes=None)")
    return ResourceBudgetError(
        f"{over.message}, more than the forward budget of {human(limit or 0)} ({source}); {done}",
        implementation=over.implementation, node=over.node,
        hint="if the model is trusted and the memory is there, raise the budget: ir2torch.convert(..., "
             "max_bytes=<bytes>) (None disables the check)")


__all__ = ["budget_error"]

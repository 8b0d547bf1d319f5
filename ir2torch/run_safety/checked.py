"""The checked run of a call whose sizes depend on data (:mod:`ir2torch.run_safety.forward_budget`): each op runs
for real after it is measured on fake tensors, against the live memory of the call.

A probe on fake tensors cannot finish when a size depends on data (``nonzero``, ``.item()``) or an operator has
no fake kernel. The call then runs under :class:`Checked`: before each real op, its outputs, any tensor it grows
and its workspace (:mod:`~ir2torch.run_safety.workspace`) are measured on fake tensors and must fit next to the
real tensors the call holds at that moment (:class:`~ir2torch.run_safety.op_modes.Live`); an op whose output size
fake tensors cannot tell is bounded by :func:`data_dependent_bound` (or its own formula,
:data:`~ir2torch.run_safety.op_preconditions.DATA_SIZES`); an op on quantized or mkldnn tensors is measured on
stand-ins or refused (:mod:`~ir2torch.run_safety.unmeasured`). No op may grow a tensor the call did not create.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from common.safety import ALLOCATING_OPS
from ir2torch.run_safety.budget import human
from ir2torch.run_safety.flops import has_formula
from ir2torch.run_safety.op_modes import (
    Flops,
    Live,
    higher_order,
    no_caller_write,
    quiet_fake_tensors,
    shape_text,
    storage_bytes,
    storage_key,
    storages,
    undecidable,
)
from ir2torch.run_safety.op_preconditions import DATA_SIZES, check_preconditions, qualified
from ir2torch.run_safety.unmeasured import proxy, unmeasured_bytes
from ir2torch.run_safety.workspace import workspace_bytes
from ir2torch.run_safety.writes import written


#: Bytes per input element an operator whose output size depends on data may allocate (measured where fake
#: tensors cannot tell): ``nonzero`` writes ``ndim`` int64 per element, ``unique`` a value and two int64,
#: ``masked_select`` a value; so ``element size + 8 x (ndim + 2)`` per element of each tensor argument.
def data_dependent_bound(args: tuple, kwargs: dict[str, Any]) -> int:
    """Upper bound of the outputs of an op whose output size depends on data (see above)."""
    return sum(t.numel() * (t.element_size() + 8 * (max(t.dim(), 1) + 2)) for t in pytree.tree_leaves((args, kwargs))
               if isinstance(t, torch.Tensor))


def unfakeable(t: Any) -> bool:
    """Whether a fake tensor cannot stand for ``t`` (quantized, mkldnn)."""
    return isinstance(t, torch.Tensor) and (t.is_quantized or t.layout == torch._mkldnn)


class Checked(TorchDispatchMode):
    """Runs each op for real after measuring it on fake tensors (sizes that depend on data): its outputs and
    workspace must fit next to the live tensors of the call (:class:`Live`, real tensors), it may not grow a
    tensor the call did not create; an op whose outputs cannot be measured is bounded by its inputs
    (:func:`data_dependent_bound`) or refused (:mod:`~ir2torch.run_safety.unmeasured`)."""

    def __init__(self, limit: int | None, where: str | None, flops: int | None = None,
                 inputs: set[Any] | None = None, external: set[Any] | None = None) -> None:
        super().__init__()
        self.limit, self.where, self.inputs = limit, where, inputs or set()
        self.live = Live(limit, where, set(external or ()) | self.inputs)
        self.flops = Flops(flops, where)
        self._fake: Any = None

    supports_higher_order_operators = True

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if isinstance(func, torch._ops.HigherOrderOperator):
            return higher_order(self, func, args, kwargs, both_branches=False)
        check_preconditions(func, args, kwargs)
        no_caller_write(func, args, kwargs, self.inputs, self.where)
        if self.limit is None:
            if self.flops.limit is not None and has_formula(func):
                self._measure(func, args, kwargs)
            return func(*args, **kwargs)
        self._measure(func, args, kwargs)
        out = func(*args, **kwargs)
        operands = storages((args, kwargs))
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.live.hold(t, func, operands)
        return out

    def _fake_run(self, func: Any, args: tuple, kwargs: dict) -> tuple[Any, Any, Any]:
        """``(output, fake args, fake kwargs)`` of ``func`` on fake tensors; output ``None``: undecidable (sizes
        from data); raises what the fake kernel raises otherwise."""
        from torch._subclasses.fake_tensor import FakeTensorMode

        if self._fake is None:
            self._fake = FakeTensorMode(allow_fallback_kernels=False)
        mode = self._fake
        fargs, fkwargs = None, None
        try:
            with quiet_fake_tensors(), mode:
                fargs, fkwargs = pytree.tree_map_only(torch.Tensor, lambda t: proxy(mode, t), (args, kwargs))
                return func(*fargs, **fkwargs), fargs, fkwargs
        except Exception as exc:
            if undecidable(exc):
                return None, fargs, fkwargs
            raise

    def _measure(self, func: Any, args: tuple, kwargs: dict) -> None:
        odd = any(unfakeable(t) for t in pytree.tree_leaves((args, kwargs)))
        try:
            out, fargs, fkwargs = self._fake_run(func, args, kwargs)
        except Exception as exc:  # noqa: BLE001 - no fake measure: modelled or refused (quantized, mkldnn), else bounded
            out = fargs = fkwargs = None
            why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            if not odd:
                # the fake kernel refuses what the real one may run (their checks differ at times: grouped_mm): the
                # real op raises its own error, or allocates at most what an op sized by data may
                modelled = unmeasured_bytes(func, args, kwargs) if self.limit is not None else None
                if modelled is not None:
                    self.live.room(modelled, func, "(by its model: it has no fake kernel)")
                elif self.limit is not None and qualified(func) not in ALLOCATING_OPS:
                    self.live.room(data_dependent_bound(args, kwargs), func, "(no fake kernel measured it; at most "
                                   "its bound)")
                elif self.limit is not None:
                    self.live.fail(f"{func} sizes its output from its arguments and its fake kernel refused them "
                                   f"({why}): it cannot be measured before it runs", unmeasured=True)
                return
        if odd and out is None:
            if self.limit is not None:
                self._unmeasured(func, args, kwargs)
            return
        if out is not None:
            self.flops.add(func, fargs, fkwargs, out)
        if self.limit is None:
            return
        live = self.live
        if out is None:
            sized = DATA_SIZES.get(qualified(func))
            modelled = unmeasured_bytes(func, args, kwargs)
            if sized is not None:
                live.room(sized(*args, **kwargs), func, "(its size depends on the data)")
            elif modelled is not None:
                live.room(modelled, func, "(by its model: it has no fake kernel)")
            elif qualified(func) in ALLOCATING_OPS:
                live.fail(f"{func} sizes its output from its arguments and has no fake implementation to "
                          "measure it before it runs")
            else:  # nonzero & co
                live.room(data_dependent_bound(args, kwargs), func, "(its output size depends on data; at most "
                          "its bound)")
            live.room(workspace_bytes(func, args, kwargs, None), func, "(its workspace)")
            return
        operands = storages((fargs, fkwargs))
        new: dict[Any, int] = {}
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                key = storage_key(t)
                if key not in operands:
                    new[key] = max(new.get(key, 0), storage_bytes(t))
                    if new[key] > live.limit:
                        live.fail(f"{func} would allocate {human(new[key])} for {shape_text(t)}")
        grown = 0
        for (_, real), (_, fake) in zip(written(func, args, kwargs), written(func, fargs, fkwargs), strict=False):
            if unfakeable(real):
                continue  # its stand-in is float32: counted at 4 bytes an element as an output, not as growth
            before, after = storage_bytes(real), storage_bytes(fake)
            if after > before:
                if storage_key(real) not in live.live:  # a parameter or buffer (inputs are never written)
                    live.grow_external(after - before, func, before)
                else:
                    grown += after - before
        live.room(sum(new.values()) + grown + workspace_bytes(func, fargs, fkwargs, out), func,
                  "(its outputs and workspace)")

    def _unmeasured(self, func: Any, args: tuple, kwargs: dict) -> None:
        size = unmeasured_bytes(func, args, kwargs)
        if size is None:
            self.live.fail(f"{func} takes a quantized or mkldnn tensor, which fake tensors cannot stand for, and has "
                           "no model of its output size: it cannot be measured before it runs", unmeasured=True)
        self.live.room(size, func, "(measured on a stand-in of its quantized or mkldnn arguments)")


__all__ = ["Checked", "data_dependent_bound", "unfakeable"]

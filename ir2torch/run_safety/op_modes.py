"""The dispatch modes that bound each operator of a rebuilt forward (:mod:`ir2torch.run_safety.forward_budget`).

:class:`Tally` runs under the probe's ``FakeTensorMode`` and adds up the storage each op creates while a tensor
holds it; :class:`Checked` runs a call whose sizes depend on data op by op, measuring each op on fake tensors
first; :class:`DataChecks` tests the data preconditions of a probed call on its real arguments. All of them test
the preconditions (:mod:`~ir2torch.run_safety.op_preconditions`), the compute budget
(:mod:`~ir2torch.run_safety.flops`) and the writes into the caller's tensors (:mod:`~ir2torch.run_safety.writes`),
and raise :class:`OverBudget`, which the forward budget turns into an ``IRError`` naming the node.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from common.safety import ALLOCATING_OPS

from .budget import human
from .flops import has_formula, human_flops, op_flops
from .op_preconditions import DATA_SIZES, check_preconditions, qualified
from .writes import caller_write


class _ProbeRecords(logging.Filter):
    """Drops the fake-tensor logger's records of a failing op while this thread probes (the real call reports
    its own error; the probe's are an internal detail)."""

    def __init__(self) -> None:
        super().__init__()
        self.quiet: set[int] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        return threading.get_ident() not in self.quiet


_RECORDS = _ProbeRecords()


@contextlib.contextmanager
def quiet_fake_tensors() -> Iterator[None]:
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    if _RECORDS not in logger.filters:
        logger.addFilter(_RECORDS)
    ident = threading.get_ident()
    nested = ident in _RECORDS.quiet
    _RECORDS.quiet.add(ident)
    try:
        yield
    finally:
        if not nested:
            _RECORDS.quiet.discard(ident)


class OverBudget(Exception):
    """Raised inside a probe; turned into :class:`ResourceBudgetError` once out of the generated code."""

    def __init__(self, message: str, implementation: str | None, node: str | None, flops: bool = False,
                 write: bool = False) -> None:
        super().__init__(message)
        self.message, self.implementation, self.node = message, implementation, node
        self.flops = flops  # the compute budget, not the memory budget
        self.write = write  # a write into the caller's tensors (ir2torch.run_safety.writes)


def in_chain(exc: BaseException | None, kinds: type | tuple[type, ...]) -> BaseException | None:
    """The first exception of ``kinds`` in ``exc``'s chain of causes and contexts (at most 50 deep), or None."""
    for _ in range(50):
        if exc is None or isinstance(exc, kinds):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def over_budget(exc: BaseException) -> OverBudget | None:
    """The :class:`OverBudget` that ``exc`` reports (directly, or as the cause of an ExecutionError)."""
    return in_chain(exc, OverBudget)  # type: ignore[return-value]


def undecidable(exc: BaseException) -> bool:
    """Whether ``exc`` says fake tensors cannot tell a size (data-dependent, or no fake kernel)."""
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException,
        DynamicOutputShapeException,
        UnsupportedOperatorException,
    )

    return in_chain(exc, (DataDependentOutputException, DynamicOutputShapeException,
                           UnsupportedOperatorException)) is not None


def node_of_frame() -> tuple[str | None, str | None]:
    """``(implementation, node)`` of the innermost generated forward running on this thread's stack."""
    frame = sys._getframe(2)
    while frame is not None:
        obj = frame.f_locals.get("self")
        if isinstance(obj, nn.Module):
            forwards = [obj.__dict__.get("forward"), type(obj).forward]
            code = frame.f_code
            if any(getattr(getattr(f, "__func__", f), "__code__", None) is code for f in forwards if f):
                wrapped = getattr(type(obj), "_wrapped_call", None)
                implementation = getattr(wrapped, "implementation", None)
                lines = getattr(obj, "_lineno_map", None) or {}
                index = lines.get(frame.f_lineno - getattr(obj, "_prologue_start", 0))
                node = None
                graph = getattr(obj, "graph", None)
                if index is not None and graph is not None:
                    fx_node = list(graph.nodes)[index]
                    node = fx_node.meta.get("ir_node", fx_node.name)
                return implementation, node
        frame = frame.f_back  # type: ignore[assignment]
    return None, None


def storage_key(t: torch.Tensor) -> Any:
    """What identifies ``t``'s storage (its C pointer), or ``t`` itself for layouts without one storage."""
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError):  # sparse and other layouts without one storage
        return id(t)


def shape_text(t: torch.Tensor) -> str:
    return f"{str(t.dtype).removeprefix('torch.')}[{', '.join(str(s) for s in t.shape)}]"


def higher_order(mode: TorchDispatchMode, func: Any, args: tuple, kwargs: dict, *, both_branches: bool) -> Any:
    """Run a higher-order operator's bodies with ``mode`` active, so that every op inside them is measured: ``cond``
    (both branches in a probe, whose predicate is fake; the one taken in a checked call), and the grad-mode and
    autocast wrappers. Any other one is refused: its bodies could not be measured."""
    name = func.name()
    with mode:
        if name == "cond":
            pred, true_fn, false_fn, operands = args
            if both_branches:
                out = true_fn(*operands)
                false_fn(*operands)
                return out
            return (true_fn if bool(pred) else false_fn)(*operands)
        if name == "wrap_with_set_grad_enabled":
            enabled, body, *rest = args
            with torch.set_grad_enabled(enabled):
                return body(*rest, **kwargs)
        if name == "wrap_with_autocast":
            device_type, dtype, enabled, cache_enabled, body, *rest = args
            with torch.autocast(device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled):
                return body(*rest, **kwargs)
    implementation, node = node_of_frame()
    raise OverBudget(f"higher-order operator {name} runs bodies whose allocations cannot be measured",
                      implementation, node)


class Tally(TorchDispatchMode):
    """Under a ``FakeTensorMode``: the storage each op creates, kept while a tensor holds it; raises
    :class:`OverBudget` when one op's output or the live total exceeds ``limit``."""

    def __init__(self, limit: int | None, where: str | None, external: set[Any], flops: int | None = None,
                 inputs: set[Any] | None = None) -> None:
        super().__init__()
        self.limit = limit if limit is not None else math.inf
        self.where, self.external, self.inputs = where, external, inputs or set()
        self.flops = Flops(flops, where)
        self.live: dict[int, list[int]] = {}  # storage id -> [bytes, tensors holding it]
        self.total = 0
        self.peak = 0

    supports_higher_order_operators = True

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if isinstance(func, torch._ops.HigherOrderOperator):
            return higher_order(self, func, args, kwargs or {}, both_branches=True)
        check_preconditions(func, args, kwargs or {})
        no_caller_write(func, args, kwargs or {}, self.inputs, self.where)
        out = func(*args, **(kwargs or {}))
        self.flops.add(func, args, kwargs or {}, out)
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self._hold(t, func)
        return out

    def _hold(self, t: torch.Tensor, func: Any) -> None:
        if t.device.type == "meta":
            return  # a tensor on meta (a model rebuilt there) allocates nothing
        key = storage_key(t)
        if key in self.external:
            return  # a view of an input, a parameter or a buffer: no new memory
        try:
            size = t.untyped_storage().nbytes()
        except (RuntimeError, NotImplementedError):
            size = t.numel() * t.element_size()
        entry = self.live.get(key)
        if entry is None:
            if size > self.limit:
                self._fail(f"{func} would allocate {human(size)} for {shape_text(t)}")
            entry = self.live[key] = [size, 0]
            self.total += size
        elif size > entry[0]:  # grown in place (resize_)
            if size > self.limit:
                self._fail(f"{func} would grow a tensor to {human(size)} ({shape_text(t)})")
            self.total += size - entry[0]
            entry[0] = size
        entry[1] += 1
        weakref.finalize(t, self._release, key)
        if self.total > self.limit:
            self._fail(f"{func} ({shape_text(t)}) would bring the live tensors of the call to {human(self.total)}")
        self.peak = max(self.peak, self.total)

    def _release(self, key: int) -> None:
        entry = self.live.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            self.total -= entry[0]
            del self.live[key]

    def _fail(self, message: str) -> None:
        implementation, node = node_of_frame()
        raise OverBudget(message, implementation or self.where, node)


def storages(tree: Any) -> set[Any]:
    """The storage keys of the tensors in ``tree``."""
    return {storage_key(t) for t in pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)}


def no_caller_write(func: Any, args: tuple, kwargs: dict[str, Any], inputs: set[Any], where: str | None) -> None:
    why = caller_write(func, args, kwargs, inputs, storage_key)
    if why is not None:
        implementation, node = node_of_frame()
        raise OverBudget(why, implementation or where, node, write=True)


class Flops:
    """The FLOPs of one call so far (:func:`~ir2torch.run_safety.flops.op_flops`), against ``limit``."""

    def __init__(self, limit: int | None, where: str | None) -> None:
        self.limit, self.where, self.total = limit, where, 0

    def add(self, func: Any, args: tuple, kwargs: dict[str, Any], out: Any) -> None:
        if self.limit is None:
            return
        self.total += op_flops(func, args, kwargs, out)
        if self.total > self.limit:
            implementation, node = node_of_frame()
            raise OverBudget(f"{func} would bring the call to {human_flops(self.total)}",
                              implementation or self.where, node, flops=True)


class DataChecks(TorchDispatchMode):
    """Runs each op for real after testing its preconditions (:data:`~ir2torch.op_preconditions.PRECONDITIONS`) on
    the real arguments: a probe on fake tensors sees no index, label or offset, so a probed call of a module that
    reads them (:func:`_reads_data`) is run under this mode (nothing is measured)."""

    supports_higher_order_operators = True
    transparent_to_folding = True  # constant folding may use its values under this mode (ir2torch.fold_cache)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if isinstance(func, torch._ops.HigherOrderOperator):
            return higher_order(self, func, args, kwargs, both_branches=False)
        check_preconditions(func, args, kwargs)
        return func(*args, **kwargs)


class Checked(TorchDispatchMode):
    """Runs each op for real after measuring its output on fake tensors (sizes that depend on data)."""

    def __init__(self, limit: int | None, where: str | None, flops: int | None = None,
                 inputs: set[Any] | None = None) -> None:
        super().__init__()
        self.limit, self.where, self.inputs = limit, where, inputs or set()
        self.flops = Flops(flops, where)
        self._fake: Any = None

    supports_higher_order_operators = True

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if isinstance(func, torch._ops.HigherOrderOperator):
            return higher_order(self, func, args, kwargs, both_branches=False)
        check_preconditions(func, args, kwargs)
        no_caller_write(func, args, kwargs, self.inputs, self.where)
        if self.limit is not None or (self.flops.limit is not None and has_formula(func)):
            self._measure(func, args, kwargs)
        return func(*args, **kwargs)

    def _measure(self, func: Any, args: tuple, kwargs: dict) -> None:
        from torch._subclasses.fake_tensor import FakeTensorMode

        if self._fake is None:
            self._fake = FakeTensorMode(allow_fallback_kernels=False)
        mode = self._fake
        try:
            with quiet_fake_tensors(), mode:
                fargs, fkwargs = pytree.tree_map_only(torch.Tensor, mode.from_tensor, (args, kwargs))
                out = func(*fargs, **fkwargs)
        except Exception as exc:  # noqa: BLE001 - data-dependent output: bounded by the inputs, checked below
            if not undecidable(exc):
                return  # the real op raises its own error (its checks differ from the fake's at times: grouped_mm)
            out = None
        if out is not None:
            self.flops.add(func, fargs, fkwargs, out)
        limit = self.limit
        if limit is None:
            return
        inputs = sum(t.numel() * t.element_size() for t in pytree.tree_leaves((args, kwargs))
                     if isinstance(t, torch.Tensor) and t.layout is torch.strided)
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.numel() * t.element_size() > limit:
                implementation, node = node_of_frame()
                raise OverBudget(f"{func} would allocate {human(t.numel() * t.element_size())} for "
                                  f"{shape_text(t)}", implementation or self.where, node)
        sized = DATA_SIZES.get(qualified(func)) if out is None else None
        if sized is not None:
            size = sized(*args, **kwargs)
            if size > limit:
                implementation, node = node_of_frame()
                raise OverBudget(f"{func} would allocate {human(size)} (its size depends on the data)",
                                  implementation or self.where, node)
            return
        if out is None and qualified(func) in ALLOCATING_OPS:
            implementation, node = node_of_frame()
            raise OverBudget(f"{func} sizes its output from its arguments and has no fake implementation to "
                              "measure it before it runs", implementation or self.where, node)
        if out is None and inputs * 8 > limit:  # nonzero & co: at most (numel x ndim) int64 of the inputs
            implementation, node = node_of_frame()
            raise OverBudget(f"{func} (its output size depends on data) may allocate up to {human(inputs * 8)}",
                              implementation or self.where, node)

"""The dispatch modes that bound each operator of a rebuilt forward (:mod:`ir2torch.run_safety.forward_budget`).

:class:`Tally` runs under the probe's ``FakeTensorMode`` and adds up the storage each op creates while a tensor
holds it; :class:`Checked` runs a call whose sizes depend on data op by op, measuring each op on fake tensors
first; :class:`DataChecks` tests the data preconditions of the nodes that need it on their real arguments. All of
them test
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

from ir2torch.run_safety.budget import human
from ir2torch.run_safety.flops import human_flops, op_flops
from ir2torch.run_safety.op_preconditions import check_preconditions
from ir2torch.run_safety.workspace import workspace_bytes
from ir2torch.run_safety.writes import caller_write, writes_in_place, written


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
                 write: bool = False, unmeasured: bool = False) -> None:
        super().__init__(message)
        self.message, self.implementation, self.node = message, implementation, node
        self.unmeasured = unmeasured  # an op the budget cannot measure (ir2torch.run_safety.unmeasured)
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


def storage_bytes(t: torch.Tensor) -> int:
    """Bytes of ``t``'s storage (its elements for a layout other than strided: mkldnn, sparse; torch 2.14's fake
    ``to_mkldnn`` gives its fake a storage of one byte an element, which would undercount it)."""
    if t.layout != torch.strided:
        return t.numel() * t.element_size()
    try:
        return t.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError):
        return t.numel() * t.element_size()


def _peak(a: Any, b: Any) -> Any:
    """``max(a, b)``; of symbolic sizes (:mod:`~ir2torch.run_safety.symbolic_probe`) their symbolic maximum, which
    decides nothing (a comparison would record a guard on which value is larger)."""
    if isinstance(a, int) and isinstance(b, int):
        return a if a >= b else b
    return torch.sym_max(a, b)


class Live:
    """The storage the tensors a call created hold, kept while a tensor holds it, against ``limit``: the live
    memory of the call at any point (the probe's fake tensors, or a checked call's real ones).

    ``external``: storage keys the call did not create (its inputs, the module's parameters, buffers and tensor
    attributes); a tensor whose storage is one of them, or one of the running op's arguments', allocated nothing."""

    def __init__(self, limit: int | None, where: str | None, external: set[Any]) -> None:
        self.limit = limit if limit is not None else math.inf
        self.where, self.external = where, external
        self.live: dict[Any, list[int]] = {}  # storage key -> [bytes, tensors holding it]
        self.total = 0
        self.peak = 0

    def room(self, size: int, func: Any, what: str) -> None:
        """Refuse ``func`` when ``size`` more bytes (its predicted outputs, its workspace) would not fit."""
        if size > self.limit:
            self.fail(f"{func} would allocate {human(size)} {what}")
        if size and self.total + size > self.limit:
            self.fail(f"{func} {what} would bring the live tensors of the call to {human(self.total + size)}")
        self.peak = _peak(self.peak, self.total + size)

    def grow_external(self, growth: int, func: Any, before: int) -> None:
        """Count ``growth`` bytes of a parameter or buffer ``func`` grows (kept until the call ends)."""
        if self.total + growth > self.limit:
            self.fail(f"{func} would grow the storage of a tensor the call did not create (a parameter or a buffer) "
                      f"from {human(before)} to {human(before + growth)}, bringing the live tensors of the call to "
                      f"{human(self.total + growth)}")
        self.total += growth
        self.peak = _peak(self.peak, self.total)

    def hold(self, t: torch.Tensor, func: Any, operands: set[Any] | None = None) -> None:
        """Count ``t``'s storage while ``t`` lives (``operands``: the storage keys of the op's arguments; one not
        created by the call is external)."""
        if t.device.type == "meta":
            return  # a tensor on meta (a model rebuilt there) allocates nothing
        key = storage_key(t)
        if key in self.external:
            return  # a view of an input, a parameter or a buffer: no new memory
        entry = self.live.get(key)
        if entry is None and operands is not None and key in operands:
            self.external.add(key)  # an argument that existed before the call (a constant, a cached tensor)
            return
        size = storage_bytes(t)
        if entry is None:
            if size > self.limit:
                self.fail(f"{func} would allocate {human(size)} for {shape_text(t)}")
            entry = self.live[key] = [size, 0]
            self.total += size
        elif size > entry[0]:  # grown in place (resize_)
            if size > self.limit:
                self.fail(f"{func} would grow a tensor to {human(size)} ({shape_text(t)})")
            self.total += size - entry[0]
            entry[0] = size
        entry[1] += 1
        weakref.finalize(t, self._release, key)
        if self.total > self.limit:
            self.fail(f"{func} ({shape_text(t)}) would bring the live tensors of the call to {human(self.total)}")
        self.peak = _peak(self.peak, self.total)

    def _release(self, key: Any) -> None:
        entry = self.live.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            self.total -= entry[0]
            del self.live[key]

    def fail(self, message: str, unmeasured: bool = False) -> None:
        implementation, node = node_of_frame()
        raise OverBudget(message, implementation or self.where, node, unmeasured=unmeasured)


def grown_external(func: Any, before: list[tuple[torch.Tensor, Any, int]], live: Live) -> None:
    """Count the growth of a tensor the call did not create (``before``: each written argument, its storage key and
    bytes before the op): an observer's empty buffer resized at its first call, a hostile ``resize_`` of a
    parameter. Inputs are never written at all (:mod:`~ir2torch.run_safety.writes`)."""
    for tensor, key, size in before:
        if key not in live.live and storage_bytes(tensor) > size:
            live.grow_external(storage_bytes(tensor) - size, func, size)


def written_sizes(func: Any, args: tuple, kwargs: dict[str, Any]) -> list[tuple[torch.Tensor, Any, int]]:
    """``(tensor, storage key, bytes)`` of each argument ``func`` writes (in place, ``out=``)."""
    if not writes_in_place(func):
        return []
    return [(t, storage_key(t), storage_bytes(t)) for _, t in written(func, args, kwargs)]


class Tally(TorchDispatchMode):
    """Under a ``FakeTensorMode``: the storage each op creates, kept while a tensor holds it (:class:`Live`), plus
    each op's workspace (:mod:`~ir2torch.run_safety.workspace`) while it runs; raises :class:`OverBudget` when one
    op's output, or the live total, exceeds ``limit``, or an op grows a tensor the call did not create."""

    def __init__(self, limit: int | None, where: str | None, external: set[Any], flops: int | None = None,
                 inputs: set[Any] | None = None) -> None:
        super().__init__()
        self.where, self.inputs = where, inputs or set()
        self.live = Live(limit, where, external)
        self.flops = Flops(flops, where)

    supports_higher_order_operators = True

    @property
    def peak(self) -> int:
        return self.live.peak

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if isinstance(func, torch._ops.HigherOrderOperator):
            return higher_order(self, func, args, kwargs, both_branches=True)
        check_preconditions(func, args, kwargs)
        no_caller_write(func, args, kwargs, self.inputs, self.where)
        before = written_sizes(func, args, kwargs)
        out = func(*args, **kwargs)
        self.flops.add(func, args, kwargs, out)
        grown_external(func, before, self.live)
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.live.hold(t, func)
        self.live.room(workspace_bytes(func, args, kwargs, out), func, "(its workspace)")
        return out


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
    """Runs each op for real after testing its preconditions
    (:data:`~ir2torch.run_safety.op_preconditions.PRECONDITIONS`) on
    the real arguments: a probe on fake tensors sees no index, label or offset, so a node of generated code that
    may reach an operator reading them without naming it (a composite, a torch function, an embedding or an opaque
    leaf) runs under this mode (:mod:`~ir2torch.run_safety.node_checks`; nothing is measured)."""

    supports_higher_order_operators = True
    transparent_to_folding = True  # constant folding may use its values under this mode (ir2torch.codegen.fold_cache)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if isinstance(func, torch._ops.HigherOrderOperator):
            return higher_order(self, func, args, kwargs, both_branches=False)
        check_preconditions(func, args, kwargs)
        return func(*args, **kwargs)

"""The memory budget of a rebuilt model's forward: what a call would allocate is measured before it runs.

A file names its graph's operators and their size arguments: ``aten.full([625000000], 1.0)`` is a few bytes of
JSON and 2.5 GB at the first call; ``expand`` + ``contiguous``, ``repeat`` or a broadcast of two long vectors grow
the same way. :mod:`ir2torch.budget` bounds the parameters and buffers a rebuild allocates; this module bounds the
forward.

Every module whose ``forward`` is generated code (the rebuilt root, every rebuilt submodule, an executed FlatIR)
holds a :class:`ForwardBudget`. A call from outside any other checked call (the user calling the model, or one of
its submodules on its own) is first **probed**: the same call runs on fake tensors (``FakeTensorMode``: shapes,
dtypes and strides propagate, no byte of data is allocated, factory ops with ``device="cpu"`` included), and a
dispatch mode adds up the storage each operator creates and follows when it is freed. A call whose peak, or one
of whose operators, would exceed the budget raises :class:`~common.errors.ResourceBudgetError` naming the
implementation, the node, the operator and the size, before anything real runs. Constant folding computes its
values in the first real call, after the probe covered the plain graph they come from.

A call is probed once per input signature (shapes, dtypes and non-tensor values of its arguments): a root whose
input guard fixes every shape is probed once, a model with dynamic shapes again for each new signature. Where a
size depends on data (``nonzero``, ``.item()``), or an operator has no fake implementation, the probe cannot
finish; that signature then runs **checked**: every operator's output is measured on fake tensors right before
the real operator runs (an operator whose output size depends on data is bounded by its inputs' size).

The budget is the converter's ``max_bytes``: an int in bytes, ``"available"`` (the memory available on the
device when the call is probed) or ``None`` (no memory check, no probe; a module whose graph calls an op with
a precondition its kernel does not check, :data:`~ir2torch.op_preconditions.PRECONDITIONS`, still has it tested
before the op runs, at every call). It bounds the peak of what one call allocates
(the parameters and buffers are bounded separately when rebuilding, see :mod:`ir2torch.budget`). A rebuild on
``meta`` is probed too: a factory op runs on the device it records (``aten.full(..., device=cpu)``), and its
``"available"`` budget is the CPU's memory.
"""

from __future__ import annotations

import contextlib
import logging
import math
import operator
import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.nn.modules import module as _module
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from common.errors import ExecutionError, IRError, ResourceBudgetError, UnsafeTargetError
from common.module_state import kept_attributes
from common.names import GENERATED_ATTRS
from common.safety import ALLOCATING_OPS
from ir2torch.budget import AVAILABLE, Budget, available_bytes, human
from ir2torch.op_preconditions import DATA_SIZES, PRECONDITIONS, check_preconditions, qualified
from ir2torch.run_safety.flops import FlopBudget, flop_limit, has_formula, human_flops, op_flops
from ir2torch.run_safety.writes import caller_write, writes_in_place

#: Instance attribute holding a module's :class:`ForwardBudget` (a name the rebuilder chose).
BUDGET_ATTR = GENERATED_ATTRS["forward_budget"]
#: Signatures one module remembers as probed; a model called with more distinct shapes is probed again.
MAX_SIGNATURES = 64


class _Local(threading.local):
    depth = 0  # > 0 while a checked call (probed, checked, or the probe itself) runs on this thread


_LOCAL = _Local()


_MODULE_CALL = nn.Module.__call__
_compiling = torch.compiler.is_compiling
_exporting = torch.compiler.is_exporting
_jit_tracing = torch._C._get_tracing_state


def skip_budget() -> bool:
    """Whether a tracer runs the call (torch.compile, torch.export, ``jit.trace``, fx): it allocates nothing real
    and must see the plain call."""
    return bool(_compiling() or _exporting() or _jit_tracing() is not None or nn.Module.__call__ is not _MODULE_CALL)


def inside_checked_call() -> bool:
    """Whether a call checked by a budget is running on this thread (its submodule calls are covered by it)."""
    return _LOCAL.depth > 0


class _OverBudget(Exception):
    """Raised inside a probe; turned into :class:`ResourceBudgetError` once out of the generated code."""

    def __init__(self, message: str, implementation: str | None, node: str | None, flops: bool = False,
                 write: bool = False) -> None:
        super().__init__(message)
        self.message, self.implementation, self.node = message, implementation, node
        self.flops = flops  # the compute budget, not the memory budget
        self.write = write  # a write into the caller's tensors (ir2torch.run_safety.writes)


class ForwardBudget:
    """The forward budget of one rebuilt module (see the module docstring).

    Args:
        budget: bytes, :data:`~ir2torch.budget.AVAILABLE` or ``None``.
        device: the device the module was rebuilt on (for ``"available"``).
        static: the module's input guard fixes every input (shapes, dtypes, constants): one probe covers
            every call it lets through.
        flops: the compute budget of one call in FLOPs (:mod:`ir2torch.run_safety.flops`), ``None``: not counted.
    """

    __slots__ = ("budget", "checked", "data_checks", "device", "flops", "probed", "static")

    def __init__(self, budget: Budget, device: torch.device, static: bool = False, flops: int | None = None,
                 data_checks: bool = False) -> None:
        self.budget = budget
        self.device = device
        self.static = static
        self.flops = flops
        self.data_checks = data_checks  # a probed call runs with the data preconditions (_DataChecks)
        self.probed: set[Any] = set()
        self.checked: set[Any] = set()

    def __deepcopy__(self, memo: dict[int, Any]) -> ForwardBudget:
        return ForwardBudget(self.budget, self.device, self.static, self.flops,  # a copy is probed again
                             self.data_checks)

    def limit(self) -> int | None:
        """The budget in bytes now (``"available"`` is read at each probe)."""
        if self.budget is None:
            return None
        if self.budget == AVAILABLE:
            # a model on meta still runs factory ops on their recorded device (the CPU): its memory counts
            return available_bytes(torch.device("cpu") if self.device.type == "meta" else self.device)
        return int(self.budget)

    def call(self, obj: nn.Module, call: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> Any:
        """``call(obj, *args, **kwargs)`` after the probe of its signature (or checked op by op)."""
        if self.budget is None:  # no memory limit: checked op by op (preconditions, FLOPs, writes)
            return self._run_checked(obj, call, args, kwargs)
        signature = None if self.static else _signature(args, kwargs)
        if signature not in self.probed:
            if signature in self.checked:
                return self._run_checked(obj, call, args, kwargs)
            limit = self.limit()
            if limit is None and self.flops is None:
                _remember(self.probed, signature)
            elif not self._probe(obj, call, args, kwargs, limit):
                _remember(self.checked, signature)
                return self._run_checked(obj, call, args, kwargs)
            else:
                _remember(self.probed, signature)
        _LOCAL.depth += 1
        try:
            if self.data_checks:  # fake tensors had no values: the index checks run on the real ones
                with _DataChecks():
                    return call(obj, *args, **kwargs)
            return call(obj, *args, **kwargs)
        finally:
            _LOCAL.depth -= 1

    def _probe(self, obj: nn.Module, call: Callable[..., Any], args: tuple, kwargs: dict[str, Any],
               limit: int | None) -> bool:
        """Run the call on fake tensors; True when it fits, False when it cannot be told (data-dependent sizes).

        Raises:
            ResourceBudgetError: the call would exceed ``limit``.
            IRError: what the call raises on fake tensors (an input guard's mismatch, a bad graph).
        """
        from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

        if any(isinstance(t, FakeTensor) for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)):
            return True  # a caller's fake tensors (its own FakeTensorMode runs the ops): nothing real runs
        _LOCAL.depth += 1
        try:
            with kept_attributes(obj), _disable_current_modes(), _quiet_fake_tensors(), _hooks_off(obj), \
                    FakeTensorMode(allow_fallback_kernels=False) as mode, \
                    _fake_state(obj, mode) as external:
                fake_args, fake_kwargs = pytree.tree_map_only(torch.Tensor, mode.from_tensor, (args, kwargs))
                inputs = _storages((fake_args, fake_kwargs))
                external.update(inputs)
                with _Tally(limit, self._where(obj), external, self.flops, inputs):
                    call(obj, *fake_args, **fake_kwargs)
        except _OverBudget as over:
            raise _budget_error(over, limit, self) from None
        except ExecutionError as exc:
            over = _over_budget(exc)
            if over is not None:
                raise _budget_error(over, limit, self) from None
            return False  # fake tensors could not run it (data-dependent sizes, no fake kernel): checked op by op
        except IRError:
            raise  # the input guard's mismatch, raised before any op runs
        except Exception:  # noqa: BLE001 - fake tensors could not run it: the real call is checked op by op
            return False
        finally:
            _LOCAL.depth -= 1
        return True

    def _run_checked(self, obj: nn.Module, call: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> Any:
        limit = self.limit()
        _LOCAL.depth += 1
        try:
            with _Checked(limit, self._where(obj), self.flops, _storages((args, kwargs))):
                return call(obj, *args, **kwargs)
        except IRError as exc:
            over = _over_budget(exc)
            if over is not None and (limit is not None or over.flops or over.write):
                raise _budget_error(over, limit or 0, self) from None
            raise
        except _OverBudget as over:
            raise _budget_error(over, limit or 0, self) from None
        finally:
            _LOCAL.depth -= 1

    @staticmethod
    def _where(obj: nn.Module) -> str | None:
        wrapped = getattr(type(obj), "_wrapped_call", None)
        return getattr(wrapped, "implementation", None)


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
def _quiet_fake_tensors() -> Iterator[None]:
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


_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_GLOBAL_HOOKS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                 "_global_backward_pre_hooks")


@contextlib.contextmanager
def _hooks_off(root: nn.Module) -> Iterator[None]:
    """No module hook (of ``root``'s modules, or global) runs during a probe: hooks see real calls only."""
    saved = [(m, name, m.__dict__[name]) for m in root.modules() for name in _HOOK_DICTS
             if m.__dict__.get(name)]
    saved_globals = [(name, getattr(_module, name)) for name in _GLOBAL_HOOKS if getattr(_module, name)]
    for m, name, _ in saved:
        m.__dict__[name] = OrderedDict()
    for name, _ in saved_globals:
        setattr(_module, name, OrderedDict())
    try:
        yield
    finally:
        for m, name, hooks in saved:
            m.__dict__[name] = hooks
        for name, hooks in saved_globals:
            setattr(_module, name, hooks)


@contextlib.contextmanager
def _fake_state(root: nn.Module, mode: Any) -> Iterator[set[Any]]:
    """``root``'s parameters, buffers and tensor attributes replaced by fake tensors for a probe (restored after):
    nothing the probe runs reads or writes a real tensor (a real tensor reaching the fake mode makes it fail).
    Yields the storage keys of those fakes (they exist before the call: not allocated by it)."""
    saved: list[tuple[dict, str, Any]] = []
    external: set[Any] = set()
    try:
        for m in root.modules():
            for table in (m._parameters, m._buffers, m.__dict__):
                for name, value in list(table.items()):
                    if isinstance(value, torch.Tensor):
                        saved.append((table, name, value))
                        table[name] = fake = mode.from_tensor(value)
                        external.add(_storage_key(fake))
        yield external
    finally:
        for table, name, value in reversed(saved):
            table[name] = value


def _remember(signatures: set[Any], signature: Any) -> None:
    if len(signatures) >= MAX_SIGNATURES:
        signatures.clear()
    signatures.add(signature)


def _signature(args: tuple, kwargs: dict[str, Any]) -> Any:
    """What decides a call's sizes: each tensor's shape, dtype and device; every other leaf's value."""
    leaves, spec = pytree.tree_flatten((args, kwargs))
    out: list[Any] = [spec]
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            out.append((tuple(leaf.shape), leaf.dtype, leaf.device.type, leaf.layout))
        elif isinstance(leaf, (int, float, bool, str, type(None), torch.dtype, torch.device)):
            out.append((type(leaf), leaf))
        else:
            out.append(id(leaf))  # unhashable or opaque: its identity (a new object is probed again)
    return tuple(out)


def _in_chain(exc: BaseException | None, kinds: type | tuple[type, ...]) -> BaseException | None:
    """The first exception of ``kinds`` in ``exc``'s chain of causes and contexts (at most 50 deep), or None."""
    for _ in range(50):
        if exc is None or isinstance(exc, kinds):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def _over_budget(exc: BaseException) -> _OverBudget | None:
    """The :class:`_OverBudget` that ``exc`` reports (directly, or as the cause of an ExecutionError)."""
    return _in_chain(exc, _OverBudget)  # type: ignore[return-value]


def _undecidable(exc: BaseException) -> bool:
    """Whether ``exc`` says fake tensors cannot tell a size (data-dependent, or no fake kernel)."""
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException,
        DynamicOutputShapeException,
        UnsupportedOperatorException,
    )

    return _in_chain(exc, (DataDependentOutputException, DynamicOutputShapeException,
                           UnsupportedOperatorException)) is not None


def _budget_error(over: _OverBudget, limit: int | None, budget: ForwardBudget) -> IRError:
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
    return ResourceBudgetError(
        f"{over.message}, more than the forward budget of {human(limit or 0)} ({source}); nothing was allocated",
        implementation=over.implementation, node=over.node,
        hint="if the model is trusted and the memory is there, raise the budget: ir2torch.convert(..., "
             "max_bytes=<bytes>) (None disables the check)")


def _node_of_frame() -> tuple[str | None, str | None]:
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


def _storage_key(t: torch.Tensor) -> Any:
    """What identifies ``t``'s storage (its C pointer), or ``t`` itself for layouts without one storage."""
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError):  # sparse and other layouts without one storage
        return id(t)


def _shape_text(t: torch.Tensor) -> str:
    return f"{str(t.dtype).removeprefix('torch.')}[{', '.join(str(s) for s in t.shape)}]"


def _higher_order(mode: TorchDispatchMode, func: Any, args: tuple, kwargs: dict, *, both_branches: bool) -> Any:
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
    implementation, node = _node_of_frame()
    raise _OverBudget(f"higher-order operator {name} runs bodies whose allocations cannot be measured",
                      implementation, node)


class _Tally(TorchDispatchMode):
    """Under a ``FakeTensorMode``: the storage each op creates, kept while a tensor holds it; raises
    :class:`_OverBudget` when one op's output or the live total exceeds ``limit``."""

    def __init__(self, limit: int | None, where: str | None, external: set[Any], flops: int | None = None,
                 inputs: set[Any] | None = None) -> None:
        super().__init__()
        self.limit = limit if limit is not None else math.inf
        self.where, self.external, self.inputs = where, external, inputs or set()
        self.flops = _Flops(flops, where)
        self.live: dict[int, list[int]] = {}  # storage id -> [bytes, tensors holding it]
        self.total = 0
        self.peak = 0

    supports_higher_order_operators = True

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if isinstance(func, torch._ops.HigherOrderOperator):
            return _higher_order(self, func, args, kwargs or {}, both_branches=True)
        check_preconditions(func, args, kwargs or {})
        _no_caller_write(func, args, kwargs or {}, self.inputs, self.where)
        out = func(*args, **(kwargs or {}))
        self.flops.add(func, args, kwargs or {}, out)
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self._hold(t, func)
        return out

    def _hold(self, t: torch.Tensor, func: Any) -> None:
        if t.device.type == "meta":
            return  # a tensor on meta (a model rebuilt there) allocates nothing
        key = _storage_key(t)
        if key in self.external:
            return  # a view of an input, a parameter or a buffer: no new memory
        try:
            size = t.untyped_storage().nbytes()
        except (RuntimeError, NotImplementedError):
            size = t.numel() * t.element_size()
        entry = self.live.get(key)
        if entry is None:
            if size > self.limit:
                self._fail(f"{func} would allocate {human(size)} for {_shape_text(t)}")
            entry = self.live[key] = [size, 0]
            self.total += size
        elif size > entry[0]:  # grown in place (resize_)
            if size > self.limit:
                self._fail(f"{func} would grow a tensor to {human(size)} ({_shape_text(t)})")
            self.total += size - entry[0]
            entry[0] = size
        entry[1] += 1
        weakref.finalize(t, self._release, key)
        if self.total > self.limit:
            self._fail(f"{func} ({_shape_text(t)}) would bring the live tensors of the call to {human(self.total)}")
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
        implementation, node = _node_of_frame()
        raise _OverBudget(message, implementation or self.where, node)


def _storages(tree: Any) -> set[Any]:
    """The storage keys of the tensors in ``tree``."""
    return {_storage_key(t) for t in pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)}


def _no_caller_write(func: Any, args: tuple, kwargs: dict[str, Any], inputs: set[Any], where: str | None) -> None:
    why = caller_write(func, args, kwargs, inputs, _storage_key)
    if why is not None:
        implementation, node = _node_of_frame()
        raise _OverBudget(why, implementation or where, node, write=True)


class _Flops:
    """The FLOPs of one call so far (:func:`~ir2torch.run_safety.flops.op_flops`), against ``limit``."""

    def __init__(self, limit: int | None, where: str | None) -> None:
        self.limit, self.where, self.total = limit, where, 0

    def add(self, func: Any, args: tuple, kwargs: dict[str, Any], out: Any) -> None:
        if self.limit is None:
            return
        self.total += op_flops(func, args, kwargs, out)
        if self.total > self.limit:
            implementation, node = _node_of_frame()
            raise _OverBudget(f"{func} would bring the call to {human_flops(self.total)}",
                              implementation or self.where, node, flops=True)


class _DataChecks(TorchDispatchMode):
    """Runs each op for real after testing its preconditions (:data:`~ir2torch.op_preconditions.PRECONDITIONS`) on
    the real arguments: a probe on fake tensors sees no index, label or offset, so a probed call of a module that
    reads them (:func:`_reads_data`) is run under this mode (nothing is measured)."""

    supports_higher_order_operators = True
    transparent_to_folding = True  # constant folding may use its values under this mode (ir2torch.codegen.fold_cache)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if isinstance(func, torch._ops.HigherOrderOperator):
            return _higher_order(self, func, args, kwargs, both_branches=False)
        check_preconditions(func, args, kwargs)
        return func(*args, **kwargs)


class _Checked(TorchDispatchMode):
    """Runs each op for real after measuring its output on fake tensors (sizes that depend on data)."""

    def __init__(self, limit: int | None, where: str | None, flops: int | None = None,
                 inputs: set[Any] | None = None) -> None:
        super().__init__()
        self.limit, self.where, self.inputs = limit, where, inputs or set()
        self.flops = _Flops(flops, where)
        self._fake: Any = None

    supports_higher_order_operators = True

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if isinstance(func, torch._ops.HigherOrderOperator):
            return _higher_order(self, func, args, kwargs, both_branches=False)
        check_preconditions(func, args, kwargs)
        _no_caller_write(func, args, kwargs, self.inputs, self.where)
        if self.limit is not None or (self.flops.limit is not None and has_formula(func)):
            self._measure(func, args, kwargs)
        return func(*args, **kwargs)

    def _measure(self, func: Any, args: tuple, kwargs: dict) -> None:
        from torch._subclasses.fake_tensor import FakeTensorMode

        if self._fake is None:
            self._fake = FakeTensorMode(allow_fallback_kernels=False)
        mode = self._fake
        try:
            with _quiet_fake_tensors(), mode:
                fargs, fkwargs = pytree.tree_map_only(torch.Tensor, mode.from_tensor, (args, kwargs))
                out = func(*fargs, **fkwargs)
        except Exception as exc:  # noqa: BLE001 - data-dependent output: bounded by the inputs, checked below
            if not _undecidable(exc):
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
                implementation, node = _node_of_frame()
                raise _OverBudget(f"{func} would allocate {human(t.numel() * t.element_size())} for "
                                  f"{_shape_text(t)}", implementation or self.where, node)
        sized = DATA_SIZES.get(qualified(func)) if out is None else None
        if sized is not None:
            size = sized(*args, **kwargs)
            if size > limit:
                implementation, node = _node_of_frame()
                raise _OverBudget(f"{func} would allocate {human(size)} (its size depends on the data)",
                                  implementation or self.where, node)
            return
        if out is None and qualified(func) in ALLOCATING_OPS:
            implementation, node = _node_of_frame()
            raise _OverBudget(f"{func} sizes its output from its arguments and has no fake implementation to "
                              "measure it before it runs", implementation or self.where, node)
        if out is None and inputs * 8 > limit:  # nonzero & co: at most (numel x ndim) int64 of the inputs
            implementation, node = _node_of_frame()
            raise _OverBudget(f"{func} (its output size depends on data) may allocate up to {human(inputs * 8)}",
                              implementation or self.where, node)


def static_guard(root: nn.Module) -> bool:
    """Whether ``root``'s input guard fixes every input it lets through (static shapes, dtypes and constants)."""
    meta = getattr(root, "meta", None)
    guard = meta.get("input_guard") if isinstance(meta, dict) else None
    if guard is None:
        return False
    return bool(guard.leaves) and all(leaf.kind in ("tensor", "constant") for leaf in guard.leaves) and \
        not guard._dynamic and not guard._scalars


def _names_precondition_ops(module: nn.Module) -> bool:
    """Whether ``module``'s own graph calls an op of :data:`~ir2torch.op_preconditions.PRECONDITIONS`, or one that
    writes an argument in place (checked not to write its caller's tensors, :mod:`ir2torch.run_safety.writes`)."""
    graph = getattr(module, "graph", None)
    if not isinstance(graph, torch.fx.Graph):
        return False
    targets = [getattr(node.target, "overload", node.target) for node in graph.nodes if node.op == "call_function"]
    return any(qualified(target) in PRECONDITIONS or writes_in_place(target) for target in targets)


#: Python-level functions of the allow-list that dispatch to an operator reading indices from data.
_DATA_FUNCTIONS = (torch.gather, torch.index_select, torch.nn.functional.embedding)
_DATA_NAMES = frozenset({"torch.gather", "torch.index_select", "torch.nn.functional.embedding"})


def _reads_data(root: nn.Module, names: set[str] | None) -> bool:
    """Whether a call of ``root`` may run an op whose preconditions read tensor data (indices, labels, offsets,
    :mod:`ir2torch.run_safety.index_checks`): the file names one (``names``: every function name of the IR or
    FlatIR) or a Python function dispatching to one, a built graph does (without ``names``; a graph not built yet
    is never built here), a ``getitem`` with a computed index (``x[idx]`` is ``aten.index``), or a module is
    not generated code and not one of torch.nn's own (an opaque leaf: its code is not read) or an embedding."""
    if names is not None and any(n in PRECONDITIONS or n in _DATA_NAMES for n in names):
        return True
    for module in root.modules():
        graph = module.__dict__.get("_graph") if names is None else None
        if isinstance(graph, torch.fx.Graph):
            for node in graph.nodes:
                if node.op != "call_function":
                    continue
                target = getattr(node.target, "overload", node.target)
                if qualified(target) in PRECONDITIONS or node.target in _DATA_FUNCTIONS:
                    return True
                if node.target is operator.getitem and any(isinstance(a, torch.fx.Node) for a in
                                                           pytree.tree_leaves(list(node.args[1:]))):
                    return True
        elif isinstance(module, (nn.Embedding, nn.EmbeddingBag)) or (
                getattr(type(module), "_wrapped_call", None) is None
                and not type(module).__module__.startswith("torch.")):
            return True
    return False


def install_budgets(root: nn.Module, budget: Budget, device: torch.device, guarded: bool,
                    flops: FlopBudget = None, names: set[str] | None = None) -> None:
    """Give every module of ``root`` whose forward is generated code a :class:`ForwardBudget`.

    Args:
        root: the rebuilt model.
        budget: the rebuild's ``max_bytes`` (``None``: only modules whose graph calls an op with an unchecked
            precondition get one, to test it).
        device: the device it was rebuilt on (``meta`` included: factory ops of the graph run on the device they
            record, usually the CPU).
        guarded: the root has an input guard fixing every input (one probe covers every call).
        flops: the compute budget (:func:`~ir2torch.run_safety.flops.flop_limit`: ``"auto"``, FLOPs or ``None``).
        names: every function name the file calls (whether a call reads indices from data: :func:`_reads_data`).
    """
    flop_count = flop_limit(flops, root)
    data = _reads_data(root, names)
    for module in root.modules():
        if getattr(type(module), "_wrapped_call", None) is None:
            continue
        if budget is None and flop_count is None and not _names_precondition_ops(module):
            continue  # nothing to measure and nothing a kernel assumes unchecked
        static = guarded and module is root
        module.__dict__[BUDGET_ATTR] = ForwardBudget(budget, device, static=static, flops=flop_count,
                                                     data_checks=data)


__all__ = ["BUDGET_ATTR", "MAX_SIGNATURES", "ForwardBudget", "inside_checked_call", "install_budgets", "skip_budget",
           "static_guard"]

"""The memory budget of a rebuilt model's forward: what a call would allocate is measured before it runs.

A file names its graph's operators and their size arguments: ``aten.full([625000000], 1.0)`` is a few bytes of
JSON and 2.5 GB at the first call; ``expand`` + ``contiguous``, ``repeat`` or a broadcast of two long vectors grow
the same way. :mod:`ir2torch.run_safety.budget` bounds the parameters and buffers a rebuild allocates; this module
bounds the forward.

Every module whose ``forward`` is generated code (the rebuilt root, every rebuilt submodule, an executed FlatIR)
holds a :class:`ForwardBudget`. A call from outside any other checked call (the user calling the model, or one of
its submodules on its own) is first **probed**: the same call runs on fake tensors (``FakeTensorMode``: shapes,
dtypes and strides propagate, no byte of data is allocated, factory ops with ``device="cpu"`` included), and a
dispatch mode adds up the storage each operator creates and follows when it is freed. A call whose peak, or one
of whose operators, would exceed the budget raises :class:`~common.errors.ResourceBudgetError` naming the
implementation, the node, the operator and the size, before anything real runs. Constant folding computes its
values in the first real call, after the probe covered the plain graph they come from.

A call is probed once per input signature (shapes, strides, dtypes and non-tensor values of its arguments): a root
whose input guard fixes every shape is probed once, a model with dynamic shapes again for each new signature, until
enough signatures differing in sizes only were probed for one probe on symbolic sizes to be worth it: it covers the
others the same decisions would (a decoder's growing cache: :mod:`~ir2torch.run_safety.symbolic_probe`). The
real calls after a probe still have each node writing in place test its real arguments against the call's inputs
(:mod:`~ir2torch.run_safety.writes`: what aliases the caller's tensors is decided on real storages, not only on the
probe's fake ones). Where a
size depends on data (``nonzero``, ``.item()``), or an operator has no fake implementation, the probe cannot
finish; that signature then runs **checked** (:mod:`~ir2torch.run_safety.checked`): every operator is measured
on fake tensors right before the real operator runs, against the live tensors the call holds then (an operator
whose output size depends on data is bounded by its inputs).

The budget is the converter's ``max_bytes``: an int in bytes, ``"available"`` (the memory available on the
device when the call is probed) or ``None`` (no memory check, no probe; with no compute budget either, a module
whose graph writes in place runs as it is, each node writing in place testing that its target is not one of the
caller's tensors, :mod:`~ir2torch.run_safety.writes`; with a compute budget, the call is counted op by op).
Whatever the budget, an op with a precondition its kernel does not check
(:data:`~ir2torch.run_safety.op_preconditions.PRECONDITIONS`) has it tested by the node that calls it, on the real
arguments, before it runs (:mod:`~ir2torch.run_safety.node_checks`). It bounds the peak of what one call allocates
(the parameters and
buffers are bounded separately when rebuilding, see :mod:`ir2torch.run_safety.budget`). A rebuild on
``meta`` is probed too: a factory op runs on the device it records (``aten.full(..., device=cpu)``), and its
``"available"`` budget is the CPU's memory.

The probe's context (fake parameters, hooks off) is in :mod:`~ir2torch.run_safety.fake_probe`; the dispatch modes
that measure each operator in :mod:`~ir2torch.run_safety.op_modes` (the probe's tally, the live total) and
:mod:`~ir2torch.run_safety.checked` (the checked run).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import _disable_current_modes

from common.errors import ExecutionError, IRError
from common.module_state import kept_attributes
from common.names import GENERATED_ATTRS
from ir2torch.run_safety.budget import AVAILABLE, Budget, available_bytes
from ir2torch.run_safety.budget_errors import budget_error as _budget_error
from ir2torch.run_safety.checked import Checked
from ir2torch.run_safety.fake_probe import fake_state, hooks_off, state_storages
from ir2torch.run_safety.flops import FlopBudget, flop_limit
from ir2torch.run_safety.op_modes import OverBudget, Tally, over_budget, quiet_fake_tensors, storages
from ir2torch.run_safety.signatures import call_storages
from ir2torch.run_safety.signatures import signature as _signature
from ir2torch.run_safety.symbolic_probe import SymbolicCovers
from ir2torch.run_safety.writes import CALLER, foreign_writes

#: Instance attribute holding a module's :class:`ForwardBudget` (a name the rebuilder chose).
BUDGET_ATTR = GENERATED_ATTRS["forward_budget"]
#: Signatures one module remembers as probed; a model called with more distinct shapes is probed again (all of
#: them: the set is emptied when full). A decoder's ``generate()`` makes one per sequence length: 1024 keeps a
#: generation of up to about a thousand tokens probed once per process, not at every step of every later run (a
#: signature is a short tuple of shapes).
MAX_SIGNATURES = 1024


class _Local(threading.local):
    depth = 0  # > 0 while a checked call (probed, checked, or the probe itself) runs on this thread


LOCAL = _Local()


_MODULE_CALL = nn.Module._wrapped_call_impl  # what __call__ is, also if this is imported while a tracer patches it
_compiling = torch.compiler.is_compiling
_exporting = torch.compiler.is_exporting
_jit_tracing = torch._C._get_tracing_state


def skip_budget() -> bool:
    """Whether a tracer runs the call (torch.compile, torch.export, ``jit.trace``, fx): it allocates nothing real
    and must see the plain call."""
    return bool(_compiling() or _exporting() or _jit_tracing() is not None or nn.Module.__call__ is not _MODULE_CALL)


def inside_checked_call() -> bool:
    """Whether a call checked by a budget is running on this thread (its submodule calls are covered by it)."""
    return LOCAL.depth > 0


class ForwardBudget:
    """The forward budget of one rebuilt module (see the module docstring).

    Args:
        budget: bytes, :data:`~ir2torch.run_safety.budget.AVAILABLE` or ``None``.
        device: the device the module was rebuilt on (for ``"available"``).
        static: the module's input guard fixes every input (shapes, dtypes, constants): one probe covers
            every call it lets through.
        flops: the compute budget of one call in FLOPs (:mod:`ir2torch.run_safety.flops`), ``None``: not counted.
    """

    __slots__ = ("budget", "checked", "device", "flops", "probed", "spec", "static", "symbolic", "token", "tokens",
                 "writes")

    def __init__(self, budget: Budget, device: torch.device, static: bool = False, flops: int | None = None,
                 writes: bool = True) -> None:
        self.budget = budget
        self.device = device
        self.static = static
        self.flops = flops
        self.writes = writes  # a graph of the module or of a submodule calls an op writing in place
        self.probed: set[Any] = set()
        self.checked: set[Any] = set()
        self.spec: pytree.TreeSpec | None = None  # the structure of the last call (read first by the next)
        self.token: int | None = None  # ``self.spec``'s token in the signatures
        self.tokens: dict[pytree.TreeSpec, int] = {}  # each structure seen -> its token (never reused)
        self.symbolic = SymbolicCovers()

    def __deepcopy__(self, memo: dict[int, Any]) -> ForwardBudget:
        return ForwardBudget(self.budget, self.device, self.static, self.flops, self.writes)  # probed again

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
        if self.budget is None and self.flops is None:  # nothing to measure: in-place nodes test the caller's tensors
            return self._run_writes_checked(obj, call, args, kwargs)
        # no memory limit but a compute budget: the same probe counts the FLOPs on fake tensors (limit None)
        signature = None if self.static else self.key(args, kwargs)
        if signature not in self.probed:
            if signature in self.checked:
                return self._run_checked(obj, call, args, kwargs)
            limit = self.limit()
            covered = signature is not None and self.symbolic.covered(signature, limit)  # (.symbolic_probe)
            if not covered and not self._probe(obj, call, args, kwargs, limit, signature):
                _remember(self.checked, signature)
                return self._run_checked(obj, call, args, kwargs)
            _remember(self.probed, signature)
        if self.writes:  # the probe saw the writes on fake tensors; the nodes writing in place test the real ones
            return self._run_writes_checked(obj, call, args, kwargs)
        LOCAL.depth += 1
        try:  # fake tensors had no values: the nodes reading indices check them (ir2torch.run_safety.node_checks)
            return call(obj, *args, **kwargs)
        finally:
            LOCAL.depth -= 1

    def key(self, args: tuple, kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """The call's :func:`_signature` as remembered: its structure as a token, one per equal structures (a
        ``TreeSpec`` is hashed only when the last call's differs: 5 us for a decoder's cache). Tokens are never
        reused: a signature remembered under one structure never matches another."""
        signature = _signature(args, kwargs, self.spec)
        spec = signature[0]
        if spec is not self.spec or self.token is None:
            if len(self.tokens) >= MAX_SIGNATURES:
                self.tokens.clear()  # the signatures of a cleared token are never matched again: probed anew
                self.symbolic = SymbolicCovers()
            token = self.tokens.get(spec)
            if token is None:
                token = self.tokens[spec] = next(_TOKENS)
            self.spec, self.token = spec, token
        return (self.token, *signature[1:])

    def _probe(self, obj: nn.Module, call: Callable[..., Any], args: tuple, kwargs: dict[str, Any],
               limit: int | None, signature: Any = None) -> bool:
        """Run the call on fake tensors; True when it fits, False when it cannot be told (data-dependent sizes).
        Then let :class:`~ir2torch.run_safety.symbolic_probe.SymbolicCovers` learn ``signature``: once enough of
        its structure's signatures differing in sizes only were probed, it probes those sizes as symbols (one probe
        for the sizes of the family the guards allow).

        Raises:
            ResourceBudgetError: the call would exceed ``limit``.
            IRError: what the call raises on fake tensors (an input guard's mismatch, a bad graph).
        """
        from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

        if any(isinstance(t, FakeTensor) for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)):
            return True  # a caller's fake tensors (its own FakeTensorMode runs the ops): nothing real runs
        LOCAL.depth += 1
        try:
            with kept_attributes(obj), _disable_current_modes(), quiet_fake_tensors(), hooks_off(obj), \
                    FakeTensorMode(allow_fallback_kernels=False) as mode, \
                    fake_state(obj, mode) as external:
                fake_args, fake_kwargs = pytree.tree_map_only(torch.Tensor, mode.from_tensor, (args, kwargs))
                inputs = storages((fake_args, fake_kwargs))
                external.update(inputs)
                with Tally(limit, self._where(obj), external, self.flops, inputs):
                    call(obj, *fake_args, **fake_kwargs)
            if signature is not None:  # never raises: a symbolic probe that fails covers nothing
                self.symbolic.learn(obj, call, signature, args, kwargs, limit, self._where(obj), self.flops)
        except OverBudget as over:
            raise _budget_error(over, limit, self) from None
        except ExecutionError as exc:
            over = over_budget(exc)
            if over is not None:
                raise _budget_error(over, limit, self) from None
            return False  # fake tensors could not run it (data-dependent sizes, no fake kernel): checked op by op
        except IRError:
            raise  # the input guard's mismatch, raised before any op runs
        except Exception:  # noqa: BLE001 - fake tensors could not run it: the real call is checked op by op
            return False
        finally:
            LOCAL.depth -= 1
        return True

    def _run_checked(self, obj: nn.Module, call: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> Any:
        limit = self.limit()
        LOCAL.depth += 1
        try:
            with Checked(limit, self._where(obj), self.flops, storages((args, kwargs)),
                         state_storages(obj) if limit is not None else None):
                return call(obj, *args, **kwargs)
        except IRError as exc:
            over = over_budget(exc)
            if over is not None and (limit is not None or over.flops or over.write):
                raise _budget_error(over, limit or 0, self, checked=True) from None
            raise
        except OverBudget as over:
            raise _budget_error(over, limit or 0, self, checked=True) from None
        finally:
            LOCAL.depth -= 1

    def _run_writes_checked(self, obj: nn.Module, call: Callable[..., Any], args: tuple,
                            kwargs: dict[str, Any]) -> Any:
        """The plain call, each node that writes in place testing its arguments against the storages of the call's
        inputs (:data:`~ir2torch.run_safety.writes.CALLER`, :mod:`~ir2torch.run_safety.node_checks`)."""
        LOCAL.depth += 1
        inputs, spec = call_storages((args, kwargs), self.spec)
        if spec is not self.spec:  # (a new structure: a key() reading it next takes its token anew)
            self.spec, self.token = spec, None
        saved, CALLER.inputs = CALLER.inputs, inputs
        try:
            return call(obj, *args, **kwargs)
        except IRError as exc:
            over = over_budget(exc)
            if over is not None and over.write:
                raise _budget_error(over, 0, self, checked=True) from None
            raise
        except OverBudget as over:
            raise _budget_error(over, 0, self, checked=True) from None
        finally:
            CALLER.inputs = saved
            LOCAL.depth -= 1

    @staticmethod
    def _where(obj: nn.Module) -> str | None:
        wrapped = getattr(type(obj), "_wrapped_call", None)
        return getattr(wrapped, "implementation", None)


#: Tokens of the structures in signatures (:meth:`ForwardBudget.key`), unique in the process.
_TOKENS = itertools.count()


def _remember(signatures: set[Any], signature: Any) -> None:
    if len(signatures) >= MAX_SIGNATURES:
        signatures.clear()
    signatures.add(signature)


def static_guard(root: nn.Module) -> bool:
    """Whether ``root``'s input guard fixes every input it lets through (static shapes, dtypes and constants)."""
    meta = getattr(root, "meta", None)
    guard = meta.get("input_guard") if isinstance(meta, dict) else None
    if guard is None:
        return False
    return bool(guard.leaves) and all(leaf.kind in ("tensor", "constant") for leaf in guard.leaves) and \
        not guard._dynamic and not guard._scalars


def _writes_in_place(module: nn.Module) -> bool:
    """Whether ``module``'s own graph calls an op that may write something other than the graph's own values in
    place (its nodes then test that they do not write its caller's tensors, :mod:`ir2torch.run_safety.writes`). A
    graph whose nodes write nothing, or only fresh results of its own operators (:func:`~ir2torch.run_safety.writes.
    foreign_writes`: a router's ``div_`` of its ``topk``, an ``index_put_`` into an ``empty_like``), cannot write
    its inputs: established here, once, when the budgets are installed. Preconditions are checked by the nodes that
    need them (:mod:`ir2torch.run_safety.node_checks`), budget or not."""
    graph = module.__dict__.get("_graph")
    if graph is None:  # an instance of a shared body whose graph is copied when first read: its template's graph
        graph = getattr(getattr(type(module), "_graph", None), "source", None) or getattr(module, "graph", None)
    if not isinstance(graph, torch.fx.Graph):
        return False
    return bool(foreign_writes(graph))


def install_budgets(root: nn.Module, budget: Budget, device: torch.device, guarded: bool,
                    flops: FlopBudget = None) -> None:
    """Give every module of ``root`` whose forward is generated code a :class:`ForwardBudget`.

    Args:
        root: the rebuilt model.
        budget: the rebuild's ``max_bytes`` (``None``: with no compute budget either, only modules whose graph
            writes in place get one, which tells their nodes the caller's tensors, so that no write reaches them).
        device: the device it was rebuilt on (``meta`` included: factory ops of the graph run on the device they
            record, usually the CPU).
        guarded: the root has an input guard fixing every input (one probe covers every call).
        flops: the compute budget (:func:`~ir2torch.run_safety.flops.flop_limit`: ``"auto"``, FLOPs or ``None``).
    """
    flop_count = flop_limit(flops, root)
    writes = _subtree_writes(root)
    for module in root.modules():
        if getattr(type(module), "_wrapped_call", None) is None:
            continue
        if budget is None and flop_count is None and not _writes_in_place(module):
            continue  # nothing to measure, no write to check (preconditions: checked by the nodes themselves)
        static = guarded and module is root
        module.__dict__[BUDGET_ATTR] = ForwardBudget(budget, device, static=static, flops=flop_count,
                                                     writes=writes[id(module)])


def _subtree_writes(root: nn.Module) -> dict[int, bool]:
    """``id(module)`` -> whether a graph of ``module`` or of a module below it writes in place (each module once)."""
    found: dict[int, bool] = {}
    stack: list[tuple[nn.Module, bool]] = [(root, False)]
    while stack:
        module, done = stack.pop()
        if id(module) in found:
            continue
        children = [c for c in module.children() if id(c) not in found]
        if not done and children:
            stack.append((module, True))
            stack.extend((c, False) for c in children)
            continue
        found[id(module)] = _writes_in_place(module) or any(found.get(id(c), False) for c in module.children())
    return found


__all__ = ["BUDGET_ATTR", "MAX_SIGNATURES", "ForwardBudget", "inside_checked_call", "install_budgets", "skip_budget",
           "static_guard"]

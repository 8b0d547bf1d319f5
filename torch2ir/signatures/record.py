"""The call signature of every non-leaf module call, recorded by hooks during the one export trace.

``preserve_module_call_signature`` would give the same facts but costs a tracepoint pair per call plus export
passes (+47% on BERT when done for every non-leaf module). Instead a forward pre-hook and a forward hook on
every non-leaf module record, for each call, the pytree structure of ``(args, kwargs)`` and of the result,
and for each leaf either a constant or the tracer's graph node that computes the tensor (found through the
proxy mode's tensor tracker). Export keeps the tracer's node objects in ``ep.graph`` (placeholders are renamed
in place) or copies them with their ``meta``, where a stamp finds them. A node that is gone is dead code: the
tensor keeps its place in the signature as a :class:`~torch2ir.signatures.match.Dead` value. A node whose value
differs makes the call *unrecorded*, and the hierarchy falls back to data-flow inputs and outputs for that
module. Resolving the records against export's graph is :mod:`torch2ir.signatures.match`.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import itertools
import operator
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

from torch2ir.hierarchy.modules import enclosing_path

#: A leaf of a recorded call: ("node", tracer node), ("const", value), or ("unknown", reason) when it cannot be
#: carried.
Leaf = tuple[str, Any]


@dataclass
class CallRecord:
    """One call of one non-leaf module, as the trace saw it."""

    module_id: int
    names: list[str] | None  # forward_arg_names: positional parameter names, then keyword names
    parameters: list[list[Any]] | None  # meta["parameters"]: the original forward's, kinds and defaults
    in_leaves: list[Leaf]
    in_spec: pytree.TreeSpec
    out_leaves: list[Leaf] = field(default_factory=list)
    out_spec: pytree.TreeSpec | None = None
    created: list[Any] = field(default_factory=list)  # tracer nodes the call created, last first (tie it to its frame)
    start: Any = None  # the tracer's last node when the call began


_SIGNATURES: dict[Any, inspect.Signature] = {}
#: ``(forward function, number of positional arguments, keyword names) -> (arg_names, parameters)``: they depend
#: on the function and on which arguments a call gives, not on the values, so conversions share them.
_KNOWN: dict[tuple, tuple[list[str] | None, list[list[Any]] | None]] = {}


def class_forward(module: nn.Module) -> Any:
    """The function ``module.forward`` runs when it is its class's (``None`` when the instance has a forward of its
    own): also through a wrapper made with ``functools.wraps`` of the module's own bound ``forward`` (the
    stand-in forwards of :mod:`torch2ir.trace_once.trace`), whose signature ``inspect.signature`` reads through."""
    forward = module.__dict__.get("forward")
    if forward is not None:
        forward = getattr(forward, "__wrapped__", None)
        if getattr(forward, "__self__", None) is not module:
            return None
    else:
        forward = module.forward
    return getattr(forward, "__func__", None)


def forward_signature(module: nn.Module) -> inspect.Signature:
    """``inspect.signature(module.forward)``, cached by the function (``forward`` of the class, usually).

    Raises:
        TypeError, ValueError: no signature can be read.
    """
    forward = module.forward
    fn = class_forward(module)
    if fn is None:
        return inspect.signature(forward)
    sig = _SIGNATURES.get(fn)
    if sig is None:
        sig = _SIGNATURES[fn] = inspect.signature(forward)
    return sig


def arg_names(module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> list[str] | None:
    """``forward_arg_names`` of a call: the parameter name of each positional argument (``name_i`` for the
    items of ``*args``), then the keyword names; None when they cannot be found or do not bind."""
    try:
        sig = forward_signature(module)
        sig.bind(*args, **kwargs)
    except (TypeError, ValueError):
        return None
    params = list(sig.parameters.values())
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    star = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), None)
    names = positional[: len(args)]
    names += [f"{star}_{i}" for i in range(len(args) - len(names))]
    names.extend(kwargs)
    return names if len(set(names)) == len(names) else None


def in_signature_order(module: nn.Module, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments in the order of ``forward``'s parameters (those ``**kwargs`` takes last, as passed), so
    the rebuilt ``forward`` lists its parameters as the original does."""
    try:
        order = {name: i for i, name in enumerate(forward_signature(module).parameters)}
    except (TypeError, ValueError):
        return kwargs
    return dict(sorted(kwargs.items(), key=lambda item: order.get(item[0], len(order))))


_KIND_NAMES = {inspect.Parameter.POSITIONAL_ONLY: "positional_only",
               inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional_or_keyword",
               inspect.Parameter.KEYWORD_ONLY: "keyword_only"}


def parameters(module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> list[list[Any]] | None:
    """``meta["parameters"]`` of a call (see :mod:`common.parameters`): every parameter of the original
    ``forward`` with its kind and default, the items of ``**kwargs`` as keyword-only parameters; None when the
    call fills ``*args`` or a default is not an IR value (the rebuilt ``forward`` then lists the traced
    arguments only)."""
    from common.errors import IRSerializationError
    from common.values import encode

    try:
        sig = forward_signature(module)
        bound = sig.bind(*args, **kwargs).arguments
    except (TypeError, ValueError):
        return None
    out: list[list[Any]] = []
    for param in sig.parameters.values():
        if param.kind is param.VAR_POSITIONAL:
            if bound.get(param.name):
                return None
            continue
        if param.kind is param.VAR_KEYWORD:
            out += [[name, "keyword_only"] for name in bound.get(param.name, {})]
            continue
        item = [param.name, _KIND_NAMES[param.kind]]
        if param.default is not param.empty:
            try:
                encode(param.default, param.name)
            except IRSerializationError:
                return None
            item.append(param.default)
        out.append(item)
    return out


_IMMUTABLE = (str, int, float, bool, type(None))


def _copied(params: list[list[Any]] | None) -> list[list[Any]] | None:
    """A copy of ``meta["parameters"]`` sharing nothing mutable with ``params``."""
    if params is None:
        return None
    if all(type(v) in _IMMUTABLE for item in params for v in item):
        return [list(item) for item in params]
    return copy.deepcopy(params)


@functools.cache
def _tracing() -> tuple[type, Any]:
    """``FunctionalTensor`` and ``get_proxy_slot`` (imported on first use: tracing internals)."""
    from torch._subclasses.functional_tensor import FunctionalTensor
    from torch.fx.experimental.proxy_tensor import get_proxy_slot

    return FunctionalTensor, get_proxy_slot


_SCALARS = (bool, int, float, str)
_PLAIN_OF = {torch.SymInt: int, torch.SymFloat: float, torch.SymBool: bool}


def _kind(value: Any) -> str:
    """What a flat argument is to pytree: ``"t"`` a tensor, ``"n"`` ``None``, ``"s..."`` a plain scalar (each one
    leaf; the scalar's type is in the key since ``True == 1``), ``""`` anything else (flattened the slow way)."""
    if isinstance(value, torch.Tensor):
        return "t"
    if value is None:
        return "n"
    return "s" + type(value).__name__ if type(value) in _SCALARS else ""


def _is_size(value: Any) -> bool:
    """A ``torch.Size`` is one constant (its type kept), not a tuple of ints; one with symbolic sizes is not."""
    return isinstance(value, torch.Size) and all(type(v) is int for v in value)


class _Recorder:
    def __init__(self, targets: dict[int, nn.Module]) -> None:
        self.targets = targets
        #: ``id(module.__dict__)`` -> ``id(module)``: when a model registers one module under two paths, the
        #: tracer calls each module through a proxy sharing its ``__dict__`` (``_ModuleStackTracer``'s
        #: ``AttrProxy``), whose ``id`` is not the module's; the record must name the model's module
        self.by_dict = {id(m.__dict__): key for key, m in targets.items()}
        self.calls: list[CallRecord] = []
        self.open: dict[int, list[CallRecord]] = {}
        self.known: dict[tuple, tuple[list[str] | None, list[list[Any]] | None]] = {}
        self.specs: dict[Any, pytree.TreeSpec] = {}

    def _tracer(self) -> Any:
        from torch.fx.experimental import proxy_tensor

        mode = proxy_tensor.get_proxy_mode()
        return None if mode is None else mode.tracer

    def _leaf(self, value: Any, tracer: Any) -> Leaf:
        if isinstance(value, torch.Tensor):
            if tracer is None:
                return ("unknown", "no tracer")
            functional, get_proxy_slot = _tracing()
            inner = torch._from_functional_tensor(value.elem) if isinstance(value, functional) else value
            slot = get_proxy_slot(inner, tracer, None)
            if slot is None:
                return ("unknown", "tensor not traced")
            # export's graph keeps the node, or a copy of it with the same meta (the tensor's shape is not read
            # here: under the tracer's modes every attribute read of a tensor is a dispatched call)
            return ("node", _stamp(_through_tracepoint(slot.proxy.node)))
        if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            if not value.node.is_symbolic():  # a symbolic type holding a number: the number (reading it guards nothing)
                return ("const", _PLAIN_OF[type(value)](value))
            # a size under dynamic_shapes, a data-dependent count: the node computing it (export may make its size
            # nodes anew: torch2ir.signatures.match then finds the value by its expression)
            if tracer is None:
                return ("unknown", "no tracer")
            _, get_proxy_slot = _tracing()
            slot = get_proxy_slot(value, tracer, None)
            if slot is None:
                return ("unknown", "symbolic value not traced")
            return ("node", _stamp(slot.force().node))
        return ("const", value)

    def _flatten(self, value: Any) -> tuple[list[Any], pytree.TreeSpec]:
        """``tree_flatten`` (a ``torch.Size`` is one leaf), without its cost for the common cases: a call whose
        arguments are tensors, ``None`` and plain scalars, or a single tensor result."""
        if isinstance(value, torch.Tensor):
            key: Any = "tensor"
            leaves = [value]
        elif type(value) is tuple and len(value) == 2 and type(value[0]) is tuple and type(value[1]) is dict and \
                all(_kind(a) for a in value[0]) and all(_kind(v) for v in value[1].values()):
            args, kwargs = value
            key = (tuple(map(_kind, args)), tuple((k, _kind(v)) for k, v in kwargs.items()))
            leaves = [*args, *kwargs.values()]
        else:
            return pytree.tree_flatten(value, is_leaf=_is_size)
        spec = self.specs.get(key)
        if spec is None:
            spec = self.specs[key] = pytree.tree_structure(value, is_leaf=_is_size)
        return leaves, spec

    def _id(self, module: nn.Module) -> int:
        """The ``id`` of the model's module that ``module`` is, or stands for (a tracer's proxy of it)."""
        return self.by_dict.get(id(module.__dict__), id(module))

    def pre(self, module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
        tracer = self._tracer()
        if len(kwargs) > 1:
            kwargs = in_signature_order(module, kwargs)
        leaves, spec = self._flatten((args, kwargs))
        # names and parameters depend on the forward and on which arguments are given, not on their values
        forward = class_forward(module)
        shared = forward is not None
        key = (forward if shared else self._id(module), len(args), tuple(kwargs))
        known = (_KNOWN if shared else self.known).get(key)
        if known is None:
            known = (arg_names(module, args, kwargs), parameters(module, args, kwargs))
            (_KNOWN if shared else self.known)[key] = known
        if shared:  # the IR gets its own lists: a change to one IR's meta must not reach the next conversion
            known = (None if known[0] is None else list(known[0]), _copied(known[1]))
        record = CallRecord(self._id(module), known[0], known[1], [self._leaf(v, tracer) for v in leaves], spec)
        if tracer is not None and len(tracer.graph.nodes):
            record.start = tracer.graph._root.prev  # the last node so far
        self.calls.append(record)
        self.open.setdefault(self._id(module), []).append(record)

    def post(self, module: nn.Module, args: tuple, kwargs: dict[str, Any], out: Any) -> None:
        stack = self.open.get(self._id(module))
        if not stack:
            return
        record = stack.pop()
        tracer = self._tracer()
        leaves, record.out_spec = self._flatten(out)
        record.out_leaves = [self._leaf(v, tracer) for v in leaves]
        if tracer is not None:  # the last nodes the call created: one that export keeps ties the call to its frame
            node = tracer.graph._root.prev
            while node is not record.start and node.op != "root" and len(record.created) < CREATED:
                record.created.append(_stamp(node))
                node = node.prev
        record.start = None


#: How many of the last nodes a call created are kept to find its frame (export may drop the very last ones).
CREATED = 16


def signature_targets(model: nn.Module, table: Any) -> list[nn.Module]:
    """Modules whose calls are recorded: every non-leaf module below the root and outside handled leaves,
    except graph modules rebuilt with data-flow arguments (they stand for a module that had no signature)."""
    from torch import fx
    from torch.fx.graph import _PyTreeCodeGen

    out: dict[int, nn.Module] = {}
    leaves: set[str] = set()
    for path, module in model.named_modules(remove_duplicate=False):
        if not path or enclosing_path(path, leaves) is not None:
            continue
        if table.is_leaf(module):
            leaves.add(path)
        elif not (isinstance(module, fx.GraphModule) and not isinstance(module.graph._codegen, _PyTreeCodeGen)):
            out.setdefault(id(module), module)
    return list(out.values())


@contextlib.contextmanager
def record_calls(modules: list[nn.Module]) -> Iterator[list[CallRecord]]:
    """Hooks on ``modules`` for the duration of the trace; yields the list of calls they record."""
    recorder = _Recorder({id(m): m for m in modules})
    handles = []
    try:
        for module in recorder.targets.values():
            handles.append(module.register_forward_pre_hook(recorder.pre, with_kwargs=True))
            handles.append(module.register_forward_hook(recorder.post, with_kwargs=True, always_call=False))
        yield recorder.calls
    finally:
        for handle in handles:
            handle.remove()


#: ``node.meta`` key stamping the tracer nodes a call record refers to: export's passes copy ``meta`` with
#: the nodes when they copy a graph, so a stamped node is found again even when it was renamed.
STAMP = "torch2ir.traced"
_stamps = itertools.count()


def _through_tracepoint(node: Any) -> Any:
    """The value a ``getitem`` of an ``_export_tracepoint`` passes through, else ``node``: export records a preserved
    leaf's results (``ConvTranspose2d``, ``MultiheadAttention``) through a tracepoint, then removes it and its
    ``getitem`` nodes, and the graph reads the value itself."""
    while (node.op == "call_function" and node.target is operator.getitem and len(node.args) == 2
           and isinstance(node.args[0], torch.fx.Node)
           and node.args[0].target is torch.ops.higher_order._export_tracepoint
           and type(node.args[1]) is int and 0 <= node.args[1] < len(node.args[0].args)
           and isinstance(node.args[0].args[node.args[1]], torch.fx.Node)):
        node = node.args[0].args[node.args[1]]
    return node


def _stamp(node: Any) -> Any:
    node.meta.setdefault(STAMP, next(_stamps))
    return node

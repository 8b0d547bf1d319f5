"""A cheap train-mode "trace": run the model once in train mode on ``meta`` tensors and record, per module
call, the functional dropout / SDPA calls and random-number calls (see :mod:`torch2ir.train.dropout`).

``torch.export`` is the exact but expensive way to see what train mode does: a full second trace, as
long as the eval trace itself. The train trace only needs a few facts per module call: the ``p`` and
``train`` arguments of each dropout-like op, in order, and how many random ops ran. One eager forward
pass with every parameter, buffer and input swapped for a ``meta`` copy (nothing is computed or allocated, and
the model's own tensors are put back untouched), a ``TorchFunctionMode`` recording those calls and global
module hooks naming the module each call ran in, gives them at about 5% of an export's cost (a
``FakeTensorMode`` run costs 15%). Any failure (data-dependent Python control flow, a tensor attribute
that is not a parameter or buffer, ...) returns ``None`` and the caller falls back to the export-based
train trace; so does any disagreement with the eval trace (dropout counts that do not line up). On a small CPU
model the same pass runs on CPU copies instead, where it is cheaper (:mod:`torch2ir.train.device`).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import types
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

from common.module_state import kept_attributes
from torch2ir.frontend.export import traced_mode
from torch2ir.train.device import guarded_call

_aten = torch.ops.aten
#: Python-level function -> the ATen op the export graph holds for it, and its argument names in schema order.
_DROPOUTS: dict[Callable[..., Any], tuple[Any, tuple[str, ...]]] = {
    F.dropout: (_aten.dropout.default, ("input", "p", "training")),
    F.alpha_dropout: (_aten.alpha_dropout.default, ("input", "p", "training")),
    F.feature_alpha_dropout: (_aten.feature_alpha_dropout.default, ("input", "p", "training")),
    F.dropout1d: (_aten.feature_dropout.default, ("input", "p", "training")),
    F.dropout2d: (_aten.feature_dropout.default, ("input", "p", "training")),
    F.dropout3d: (_aten.feature_dropout.default, ("input", "p", "training")),
    torch.dropout: (_aten.dropout.default, ("input", "p", "train")),
    torch.feature_dropout: (_aten.feature_dropout.default, ("input", "p", "train")),
    torch.alpha_dropout: (_aten.alpha_dropout.default, ("input", "p", "train")),
    torch.feature_alpha_dropout: (_aten.feature_alpha_dropout.default, ("input", "p", "train")),
    F.scaled_dot_product_attention: (
        _aten.scaled_dot_product_attention.default,
        ("query", "key", "value", "attn_mask", "dropout_p", "is_causal"),
    ),
}
#: the calls :attr:`TrainOps.norms` records, with their argument names and defaults
_NORM_CALLS: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "torch.nn.functional.batch_norm": (
        ("input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps"),
        {"weight": None, "bias": None, "training": False, "momentum": 0.1, "eps": 1e-5}),
    "TensorBase.add_": (("self", "other", "alpha"), {"alpha": 1}),
}
_DEFAULTS = {"p": 0.5, "training": True, "train": True, "attn_mask": None, "dropout_p": 0.0, "is_causal": False}


@dataclass
class RecordedOp:
    """A dropout-like call as the export graph would hold it (``target``, positional ``args``)."""

    target: Any
    args: tuple
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class TrainOps:
    """Per module path (its first call): the dropout-like ops in order, the number of random ops and every call."""

    dropouts: dict[str, list[Any]] = field(default_factory=dict)
    randoms: dict[str, int] = field(default_factory=dict)
    #: ids of the original parameters/buffers whose meta copies the train-mode pass wrote in place or replaced
    written: set[int] = field(default_factory=set)
    #: per module path (its first call): the torch functions and submodules whose tensors reach its results or its
    #: state, in call order (queries such as ``.dim()`` or ``.is_nested``, which differ between modes where only a
    #: fast path's eligibility is checked as in ``nn.TransformerEncoderLayer``, and dead computations are left out)
    calls: dict[str, list[str]] = field(default_factory=dict)
    #: where the pass ran: ``"meta"``, or ``"cpu"`` (copies of the model's values)
    device: str = "meta"
    #: per module path (its first call): each ``F.batch_norm`` and ``Tensor.add_`` call, as ``(name, arguments in
    #: order)``, a tensor of the module's own state as ``"own:<name>"``, any other as ``"tensor"`` (for
    #: :mod:`torch2ir.train.batch_norm`)
    norms: dict[str, list[tuple[str, tuple]]] = field(default_factory=dict)


def _positional(names: tuple[str, ...], args: tuple, kwargs: Mapping[str, Any]) -> tuple:
    """The arguments in schema order, defaults filled in, probabilities as floats (as the op schema makes them)."""
    values = dict(zip(names, args))
    values.update({k: v for k, v in kwargs.items() if k in names})
    out = [values.get(n, _DEFAULTS.get(n)) for n in names]
    return tuple(float(v) if n in ("p", "dropout_p") and type(v) is int else v for n, v in zip(names, out))


_ATOMS = (int, float, bool, str, type(None), torch.dtype, torch.device)


def _tensors(value: Any) -> list[torch.Tensor]:
    """The tensors in ``value`` (called on every torch call's arguments and results: plain tuples, lists and dicts
    are walked here, anything else by pytree)."""
    out: list[torch.Tensor] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            out.append(item)
        elif type(item) in (tuple, list):
            stack.extend(item)
        elif type(item) is dict:
            stack.extend(item.values())
        elif not isinstance(item, _ATOMS):
            out.extend(t for t in pytree.tree_leaves(item) if isinstance(t, torch.Tensor))
    return out


class _Flows:
    """Per module path, the calls that computed tensors (a function or a submodule) with their input and output
    tensors, to keep only the calls whose results reach the module's results or state (:meth:`live`): Mamba's
    train branch computes ``bias.float()`` for a CUDA kernel and drops it without one."""

    def __init__(self) -> None:
        self.events: dict[str, list[tuple[str, set[int], list[torch.Tensor]]]] = {}

    def add(self, path: str, name: str | None, inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> None:
        """``name=None``: a call that passes its input's values on without being a computation of its own."""
        # the outputs are held until the pass ends, so their ids stay unique (meta tensors take no memory; a pass
        # on CPU copies runs only where the export's graph says its activations are small)
        self.events.setdefault(path, []).append((name, {id(t) for t in inputs}, outputs))

    def live(self, path: str, roots: list[torch.Tensor]) -> list[str]:
        """Names of the calls of ``path`` whose outputs reach ``roots``, in call order."""
        reached = {id(t) for t in roots}
        names = []
        for name, inputs, outputs in reversed(self.events.pop(path, [])):
            if any(id(t) in reached for t in outputs):
                if name is not None:
                    names.append(name)
                reached |= inputs
        return names[::-1]


class _Recorder(TorchFunctionMode):
    def __init__(self, current: Callable[[], str | None], random_names: frozenset[str], ops: TrainOps,
                 flows: _Flows, guarded: bool = False, owners: Mapping[str, nn.Module] | None = None) -> None:
        super().__init__()
        self.owners = owners if owners is not None else {}  # path -> module, of the calls on the stack
        self.current = current
        self.random_names = random_names
        self.ops = ops
        self.flows = flows
        self.guarded = guarded  # a pass on CPU copies: fail where meta would (torch2ir.train.device.guarded_call)

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Mapping[str, Any] | None = None
                           ) -> Any:
        kwargs = kwargs or {}
        path = self.current()
        if path is not None:
            entry = _DROPOUTS.get(func)
            if entry is not None:
                target, names = entry
                self.ops.dropouts.setdefault(path, []).append(
                    RecordedOp(target, _positional(names, args, kwargs)))
            elif getattr(func, "__name__", None) in self.random_names:
                self.ops.randoms[path] = self.ops.randoms.get(path, 0) + 1
        name = _call_name(func) if path is not None or self.guarded else ""
        if path is not None and name in _NORM_CALLS:
            self.ops.norms.setdefault(path, []).append((name, self._described(name, args, kwargs, path)))
        out = guarded_call(func, name, args, kwargs) if self.guarded else func(*args, **kwargs)
        if path is not None:
            outputs, inputs = _tensors(out), _tensors((args, kwargs))
            # computations, not queries (.dim(), .is_nested) nor calls returning their input untouched (.float() of
            # a float tensor); an in-place method (``add_``) also returns its input, and counts, as does a dropout
            # (eval mode returns its input: the IR's dropout ops carry both modes)
            if outputs and (_DROPOUTS.get(func) is not None or name.endswith("_")
                            or not all(any(o is i for i in inputs) for o in outputs)):
                # a layout copy is not a computation: whether ``.contiguous()`` copies depends on the strides the
                # kernel before it chose, which on CPU differ between modes (SDPA's math and fused kernels)
                self.flows.add(path, None if name in _LAYOUT_ONLY else name, inputs, outputs)
        return out

    def _described(self, name: str, args: tuple, kwargs: Mapping[str, Any], path: str) -> tuple:
        """The arguments of a :data:`_NORM_CALLS` call in order, defaults filled in, tensors described."""
        names, defaults = _NORM_CALLS[name]
        values = dict(zip(names, args))
        values.update({k: v for k, v in kwargs.items() if k in names})
        module = self.owners.get(path)
        tables = (*module._parameters.items(), *module._buffers.items()) if module is not None else ()
        own = {id(t): n for n, t in tables if t is not None}
        return tuple(
            (f"own:{own[id(v)]}" if id(v) in own else "tensor") if isinstance(v, torch.Tensor) else v
            for v in (values.get(n, defaults.get(n)) for n in names))


#: calls whose result holds their input's values, in another memory layout
_LAYOUT_ONLY = frozenset({"TensorBase.contiguous"})


def _call_name(func: Any) -> str:
    """A torch function or ``Tensor`` method as a name (``TensorBase.mean``, ``torch.nn.functional.dropout``)."""
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or type(func).__name__
    module = getattr(func, "__module__", None)
    return f"{module}.{name}" if module else name


def record_train_ops(model: nn.Module, args: tuple, kwargs: Mapping[str, Any] | None,
                     is_leaf: Callable[[nn.Module], bool], random_names: frozenset[str],
                     training: bool = True, stand_ins: Any = None, device: str = "meta",
                     errors: list[BaseException] | None = None, fallback: bool = True) -> TrainOps | None:
    """Run ``model`` once in train mode (or eval mode, to compare) on meta tensors, recording :class:`TrainOps`;
    ``None`` when it fails. ``stand_ins``: a :class:`torch2ir.trace_once.eager.EagerStandIns` (alike blocks run
    once). ``device="cpu"``: on CPU copies of the parameters, buffers, tensor attributes and inputs instead, the
    random-number state put back afterwards (:func:`torch2ir.train.device.pass_device` says when that is cheaper);
    a pass that fails there runs again on meta, so the choice never changes what is recorded where meta succeeds.
    ``errors``: a list the exception of each failed attempt is appended to, in order; ``fallback=False``: no
    second attempt on meta."""
    if device != "meta":
        ops = _record(model, args, kwargs, is_leaf, random_names, training, stand_ins, device, errors)
        if ops is not None or not fallback:
            return ops
    return _record(model, args, kwargs, is_leaf, random_names, training, stand_ins, "meta", errors)


def _record(model: nn.Module, args: tuple, kwargs: Mapping[str, Any] | None, is_leaf: Callable[[nn.Module], bool],
            random_names: frozenset[str], training: bool, stand_ins: Any, device: str,
            errors: list[BaseException] | None = None) -> TrainOps | None:
    try:
        from torch._export.utils import _compiling_state_context
    except ImportError:  # pragma: no cover - older torch
        _compiling_state_context = contextlib.nullcontext  # type: ignore[assignment]

    path_of: dict[int, str] = {}
    for path, module in model.named_modules():
        path_of.setdefault(id(module), path)
    stack: list[tuple[str, bool, bool]] = []  # (path, leaf, first call of this path)
    leaves = [0]  # how many entries of the stack but its first are handled leaves
    seen: set[str] = set()
    ops = TrainOps(device=device)

    def current() -> str | None:
        if not stack or leaves[0]:
            return None  # inside a handled leaf: its ops are the leaf's business
        path, _, first = stack[-1]
        return path if first else None

    flows = _Flows()
    callers: list[str | None] = []  # the recording caller of each module call on the stack
    owners: dict[str, nn.Module] = {}

    def pre(module: nn.Module, _args: Any) -> None:
        path = path_of.get(id(module))
        if path is None:  # not a registered submodule: its ops stay in the caller
            return
        callers.append(current())
        owners[path] = module
        leaf = bool(path) and is_leaf(module)
        leaves[0] += leaf and bool(stack)
        stack.append((path, leaf, path not in seen))
        seen.add(path)

    def post(module: nn.Module, args: Any, kwargs: Any, out: Any) -> None:
        if id(module) not in path_of or not stack:
            return
        recording = current()
        path, leaf, _ = stack.pop()
        leaves[0] -= leaf and bool(stack)
        caller = callers.pop()
        inputs = _tensors((args, kwargs))
        outputs = _tensors(out)
        if caller is not None:
            flows.add(caller, f"module {path}", inputs, outputs)
        if recording is not None:  # the module's own call ends: keep what reaches its results or its state
            state = [*module._buffers.values(), *module._parameters.values()]
            ops.calls[path] = flows.live(path, [*outputs, *inputs, *(t for t in state if t is not None)])

    handles = [nn.modules.module.register_module_forward_pre_hook(pre),
               nn.modules.module.register_module_forward_hook(post, with_kwargs=True, always_call=True)]
    try:
        copy = (lambda t: t.to("meta")) if device == "meta" else (lambda t: t.clone())
        meta = pytree.tree_map_only(torch.Tensor, copy, (tuple(args), dict(kwargs or {})))
        with kept_attributes(model), copied(model, device) as copies, traced_mode(model, training=training), \
                _compiling_state_context(), \
                (torch.random.fork_rng(devices=[]) if device != "meta" else contextlib.nullcontext()), \
                (stand_ins.installed() if stand_ins is not None else contextlib.nullcontext()), \
                _Recorder(current, random_names, ops, flows, guarded=device != "meta", owners=owners):
            before = {i: t._version for i, t in copies.items()}
            model(*meta[0], **meta[1])
            ops.written = copies.written(before)
        if stand_ins is not None:
            stand_ins.complete(ops)
    except Exception as exc:  # noqa: BLE001 - any failure: the caller falls back to an exported train trace
        if errors is not None:
            errors.append(exc)
        return None
    finally:
        for handle in handles:
            handle.remove()
            # a global hook registered with_kwargs keeps its id in this table after handle.remove() (torch 2.13):
            # left there, every call of this function would grow process-wide state (and torch.compile warns of
            # global hooks that are gone)
            nn.modules.module._global_forward_hooks_with_kwargs.pop(handle.id, None)
    return ops


class PassCopies(dict):
    """``{id(original tensor): its copy}`` (on meta or CPU), and the module slots :func:`copied` swapped."""

    def __init__(self) -> None:
        super().__init__()
        self.slots: list[tuple[dict[str, Any], str, Any]] = []

    def written(self, before: Mapping[int, int]) -> set[int]:
        """Ids of the originals whose copy was written in place since ``before`` (``{id: copy._version}``) or whose
        slot now holds another tensor (``self.running_mean = 0.9 * self.running_mean + ...``: brevitas' TensorNorm,
        CTRL)."""
        out = {i for i, version in before.items() if self[i]._version != version}
        out.update(id(t) for table, name, t in self.slots if table.get(name) is not self.get(id(t)))
        return out


@contextlib.contextmanager
def copied(model: nn.Module, device: str = "meta") -> Iterator[PassCopies]:
    """Swap every parameter and buffer of ``model`` for a ``meta`` copy, and put the very same objects back.
    ``device="cpu"``: for a clone instead, and every tensor held as a plain module attribute too (a forward
    computing on real values may write it in place; on meta, mixing it with a meta copy fails first).

    Yields ``{id(original tensor): its meta copy}`` (a copy's ``_version`` counts in-place writes to it; a slot
    the forward assigns anew is put back too, see :meth:`PassCopies.written`).

    Each module's own ``_parameters`` / ``_buffers`` entries are swapped once per module object, so a module
    registered under several names and weights tied between modules stay shared (one meta copy per tensor).
    ``torch.func.functional_call`` is not used: with a module registered twice it restores the meta copy
    instead of the original (torch 2.13), which would leave the user's model on ``meta``.
    """
    copies = PassCopies()

    def copy_of(t: torch.Tensor) -> torch.Tensor:
        if id(t) not in copies:
            m = t.detach().to("meta") if device == "meta" else t.detach().clone()
            copies[id(t)] = nn.Parameter(m, requires_grad=t.requires_grad) if isinstance(t, nn.Parameter) else m
        return copies[id(t)]

    saved = copies.slots
    try:
        for module in {id(m): m for m in model.modules()}.values():
            for table in (module._parameters, module._buffers):
                for name, t in table.items():
                    if t is not None:
                        saved.append((table, name, t))
                        table[name] = copy_of(t)
            if device != "meta":
                attributes = module.__dict__
                for name, t in [(n, v) for n, v in attributes.items() if isinstance(v, torch.Tensor)]:
                    saved.append((attributes, name, t))
                    attributes[name] = copy_of(t)
        yield copies
    finally:
        for table, name, t in reversed(saved):
            table[name] = t


def reads_training(cls: type) -> bool:
    """Whether ``cls.forward``, or a method of ``cls`` it calls, reads a ``training`` attribute.

    Only such a module can behave differently in train mode outside its handled leaves (DropPath's
    ``if not self.training``, LayerDrop's coin, gradient checkpointing). Found from the bytecode's attribute
    names (a ``super()`` call follows the bases' methods of the names it reads): no source file is read, about
    0.1 ms for a whole transformers model. A ``forward`` that is not plain Python counts as reading it.
    """
    return _reads_training(cls)


@functools.cache
def _reads_training(cls: type) -> bool:
    forward = getattr(cls, "forward", None)
    functions = [forward, inspect.unwrap(forward)] if isinstance(forward, types.FunctionType) else []
    if not functions:
        return True
    seen: set[types.CodeType] = set()
    return any(_code_reads_training(f.__code__, cls, seen) for f in functions)


def _code_reads_training(code: types.CodeType, cls: type, seen: set[types.CodeType]) -> bool:
    if code in seen:
        return False
    seen.add(code)
    if "training" in code.co_names:
        return True
    nested = [c for c in code.co_consts if isinstance(c, types.CodeType)]  # lambdas, comprehensions, closures
    methods = [getattr(cls, n, None) for n in code.co_names]  # self.helper(...) calls
    if "super" in code.co_names:  # super().forward(x) (timm's SyncBatchNormAct): the bases' methods of those names
        methods += [vars(base).get(n) for base in cls.__mro__[1:] for n in code.co_names]
    nested += [inspect.unwrap(m).__code__ for m in methods if isinstance(m, types.FunctionType)]
    return any(_code_reads_training(c, cls, seen) for c in nested)


"""Trace each distinct block once (``convert(..., trace_once=True)``, the default).

An 80-layer decoder has 80 alike layers; export traces each of them. Here the alike module instances are
grouped before the export (:func:`alike_groups`); during the export the first member of a group that is called
runs for real and every later member called with the same input metadata returns fresh tensors of the recorded
output metadata instead of running (a *stand-in*, :class:`StandIns`). Once the IR is built, each stood-in member
and everything below it becomes an unexpanded instance (:meth:`common.ir.Implementation.instance_of`) of a frozen
copy of the traced member's implementation (:func:`torch2ir.trace_once.instances.instantiate`); lowering copies
the traced call's ops in place of each stand-in (:mod:`torch2ir.trace_once.lower`).

A group whose real call does something a stand-in cannot repeat (returns an input, mutates an input, its state or
an attribute, returns a data-dependent size, lifts a tensor constant) is traced in full: in the same export when no
stand-in was given for it yet, else in a second export without it. Groups nest (:mod:`torch2ir.trace_once.groups`):
the blocks alike inside a member that runs for real are stood in for all the same.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import types
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

from common.errors import IRError
from torch2ir.trace_once.groups import Group, alike_groups, scalar_key
from torch2ir.trace_once.watch import watching

__all__ = ["Group", "StandIns", "TraceOnceFallback", "alike_groups", "input_key", "output_record", "stand_in"]

SCALARS = (bool, int, float, str, type(None))
MODULE_FILE = nn.modules.module.__file__  # ``Module.__call__`` calls ``forward`` from there


class TraceOnceFallback(IRError):
    """The stand-ins could not be turned into instances; the model is converted with a full export instead."""


def input_key(args: tuple, kwargs: dict[str, Any]) -> Any:
    """The input metadata of a call (``None``: a leaf a stand-in cannot be keyed by): per tensor its metadata and
    the position of the first argument that is the same tensor object (a block called with ``(h, h)`` reads one
    value for both: it does not stand in for one called with two tensors); per plain value the value. Read with
    torch-function handling off: the metadata reads are not traced, and under a torch-function mode (export's,
    the train-mode pass's recorder) each would go through it."""
    with torch._C.DisableTorchFunction():
        return _input_key(args, kwargs)


def _input_key(args: tuple, kwargs: dict[str, Any]) -> Any:
    leaves, spec = pytree.tree_flatten((args, kwargs))
    key = []
    first: dict[int, int] = {}
    for position, leaf in enumerate(leaves):
        if isinstance(leaf, torch.Tensor):
            key.append(("t", tuple(s if type(s) is int else str(s) for s in leaf.shape),  # a SymInt as its expr
                        tuple(s if type(s) is int else str(s) for s in leaf.stride()),
                        leaf.dtype, leaf.device, leaf.requires_grad, first.setdefault(id(leaf), position)))
        elif isinstance(leaf, SCALARS):
            key.append(scalar_key(leaf))
        else:
            return None
    return (spec, tuple(key))


def _unbacked(size: Any) -> bool:
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    return any(isinstance(s, torch.SymInt) and free_unbacked_symbols(s) for s in size)


def _unbacked_made(tensors: list[torch.Tensor]) -> int:
    """How many unbacked symbols (data-dependent sizes) the tracing's shape environment has made so far."""
    from torch._guards import detect_fake_mode

    env = getattr(detect_fake_mode(tensors or None), "shape_env", None)
    return env.counter["create_unbacked_symbol"] if env is not None else 0


def _traced_graph_end() -> tuple[Any, Any]:
    """The graph export is tracing into and its last node (``(None, None)`` outside a trace)."""
    from torch.fx.experimental.proxy_tensor import get_proxy_mode

    mode = get_proxy_mode()
    graph = getattr(getattr(mode, "tracer", None), "graph", None)
    return (graph, graph._root.prev) if graph is not None else (None, None)


#: graph-level calls export turns into higher-order ops (``wrap_with_set_grad_enabled``, ``wrap_with_autocast``)
_REGION_CALLS = frozenset({torch._C._set_grad_enabled, torch.amp.autocast_mode._enter_autocast,
                           torch.amp.autocast_mode._exit_autocast})


def _per_member_nodes(graph: Any, last: Any) -> str | None:
    """Why the nodes a member's call added after ``last`` are not the same in every member, if they are not:
    export names tensor constants (``lifted_tensor_3``) and higher-order subgraphs (``submod_7``) in trace order,
    so a stand-in's copies would be named otherwise than a full trace's. Found while the call is traced, the
    group's members then run for real in the same export (no second export)."""
    if graph is None:
        return None
    node = last.next
    while node is not graph._root:
        if node.op == "get_attr":
            return "its traced call reads tensor constants export lifted"
        if node.op == "call_function" and (node.target in _REGION_CALLS
                                           or isinstance(node.target, torch._ops.HigherOrderOperator)):
            return "its traced call holds a higher-order op"
        node = node.next
    return None


def _called_on(bound: Any, module: nn.Module, frame: Any) -> Any:
    """``module``'s original forward (``bound``), bound to the object it was called on (``frame``: the caller's).

    A model with a module reached by two paths makes export trace through attribute proxies (``_AttrProxy``: a
    module seen through the path it was reached by, sharing its ``__dict__``, where the stand-in forward is
    found): the forward must run on the proxy, whose submodules carry their paths; on the module itself they would
    be named from it (``fc1`` for ``blocks.0.mlp.fc1``), a different IR without a word (timm's CoaT, which shares
    its ``cpe``). A module call's frame holds the proxy as ``self``; a direct ``block.forward(x)`` is found among
    the caller's variables, and when it is not there the export fails (the model is then exported in full)."""
    from torch.fx.experimental.proxy_tensor import _AttrProxy, get_proxy_mode

    if not isinstance(bound, types.MethodType):
        return bound
    if frame.f_code.co_filename == MODULE_FILE:
        candidates = [frame.f_locals.get("self")]
    elif getattr(getattr(get_proxy_mode(), "tracer", None), "enable_attr_proxy", False):
        candidates = list(frame.f_locals.values())
        if not any(isinstance(c, _AttrProxy) and c.__dict__ is module.__dict__ for c in candidates):
            raise TraceOnceFallback(f"a direct {type(module).__name__}.forward call through an attribute proxy")
    else:
        return bound
    proxies = {id(c): c for c in candidates if isinstance(c, _AttrProxy) and c.__dict__ is module.__dict__}
    if len(proxies) > 1:
        raise TraceOnceFallback(f"a direct {type(module).__name__}.forward call through one of two proxies")
    return types.MethodType(bound.__func__, next(iter(proxies.values()))) if proxies else bound


def _identity(value: Any) -> Any:
    """A value's identity, and for a dict, list or set the identities of its items (LeViT's attention-bias
    cache is a dict its eval-mode forward fills)."""
    if isinstance(value, dict):
        return (id(value), tuple((k, id(v)) for k, v in value.items()))
    if isinstance(value, (list, set)):
        return (id(value), tuple(id(v) for v in value))
    return id(value)


def _snapshot(module: nn.Module) -> tuple[Any, Any]:
    """Attribute identities (one level into containers) and tensor versions of a subtree."""
    attrs = []
    versions = []
    for m in module.modules():
        attrs.append(tuple((k, _identity(v)) for k, v in m.__dict__.items()
                           if k not in ("_parameters", "_buffers", "_modules")))
        attrs.append(tuple((k, id(v)) for k, v in (*m._parameters.items(), *m._buffers.items(), *m._modules.items())))
        versions.extend(t._version for t in (*m._parameters.values(), *m._buffers.values()) if t is not None)
    return attrs, versions


class StandIns:
    """Installs the stand-in forwards of ``groups`` for the duration of an export. No stand-in is given inside a
    call being recorded (a traced member's body is the one its stand-ins repeat: it holds no stand-in itself)."""

    def __init__(self, groups: list[Group]) -> None:
        self.groups = groups
        self.recording = 0  # how many recorded calls are running (nested groups record inside each other)
        #: ``(class of the group's blocks, why)`` of every group traced in full after all (fallbacks)
        self.fallbacks: list[tuple[str, str]] = []

    def reset(self) -> None:
        """Forget what a (failed) export attempt recorded."""
        self.recording = 0
        for group in self.groups:
            group.records, group.stood_in, group.failure, group.keyed, group.unfit = {}, {}, None, (), {}
            group.returned = {}

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        self.reset()
        wrapped: list[nn.Module] = []
        try:
            for group in self.groups:
                if not group.enabled:
                    continue
                for index, module in enumerate(group.modules):
                    if "forward" in module.__dict__:  # alike_groups leaves such modules out; one set since
                        group.enabled = False  # the members wrapped already call their own forward
                        break
                    module.forward = self._forward(group, index, module.forward)  # type: ignore[method-assign]
                    wrapped.append(module)
            yield
        finally:
            for module in wrapped:
                module.__dict__.pop("forward", None)

    def failed(self) -> list[Group]:
        """The enabled groups whose traced call cannot be stood in for after stand-ins were given for it (disable
        them and export again). A group that failed before any stand-in ran every member for real: the export
        holds its full trace already (:meth:`traced_in_full`)."""
        return [g for g in self.groups if g.enabled and g.failure is not None and g.stood_in]

    def traced_in_full(self) -> list[tuple[Group, str]]:
        """``(group, why)`` of the enabled groups whose every member ran for real in the export just made: one
        failed before a stand-in was given, or keyed on attributes that differ in every member; and of those whose
        members called with some input key ran for real (:attr:`Group.unfit`)."""
        out = []
        for g in self.groups:
            if g.enabled and g.stood_in:  # members called with an unfit key ran for real, the others stood in
                out += [(g, f"{why} (for the members called like it; the others were stood in for)")
                        for why in dict.fromkeys(g.unfit.values())]
            if not g.enabled or g.stood_in:
                continue
            if g.failure is not None:
                out.append((g, g.failure))
            elif g.keyed:
                name = ", ".join(f"{p}.{n}" if p else n for p, n in g.keyed)
                out.append((g, f"its call reads {name}, which differs between the alike blocks"))
        return out

    def with_constants(self, constants: Any) -> list[Group]:
        """The enabled groups whose traced member owns tensor constants export lifted (``constants``: their
        qualified names): export numbers them in trace order (``lifted_tensor_2`` in the second layer), so the
        instances of the traced member would name them otherwise than a full trace."""
        return [g for g in self.groups if g.enabled and any(str(c).startswith(g.paths[i] + ".")
                                                            for i in set(g.stood_in.values()) for c in constants)]

    def with_subgraphs(self, graph: Any) -> list[Group]:
        """The enabled groups whose traced member calls a higher-order op (``wrap_with_set_grad_enabled``): export
        numbers their subgraphs in trace order too (``submod_7`` in the second layer)."""
        homes = [(g, g.paths[i]) for g in self.groups if g.enabled for i in set(g.stood_in.values())]
        if not homes:
            return []
        paths: set[str] = set()
        for node in graph.nodes:
            if node.op == "call_function" and isinstance(node.target, torch._ops.HigherOrderOperator):
                paths.update(str(path) for path, _ in (node.meta.get("nn_module_stack") or {}).values())
        return list({id(g): g for g, home in homes if any(p == home or p.startswith(home + ".") for p in paths)
                     }.values())

    def used(self) -> list[Group]:
        return [g for g in self.groups if g.enabled and g.stood_in]

    def pairs(self) -> list[tuple[str, str]]:
        """``(traced member's path, stood-in member's path)`` of every stand-in given."""
        return [(g.paths[ran], g.paths[index]) for g in self.used() for index, ran in sorted(g.stood_in.items())]

    def _forward(self, group: Group, index: int, bound: Any) -> Any:
        @functools.wraps(bound)
        def forward(*args: Any, **kwargs: Any) -> Any:
            frame = sys._getframe(1)
            original = _called_on(bound, group.modules[index], frame)
            if not group.enabled or frame.f_code.co_filename != MODULE_FILE:
                # ``layer.forward(x)`` called directly (SqueezeBERT's encoder): no module call, no frame of its own
                return original(*args, **kwargs)
            key = input_key(args, kwargs)
            if key is not None and group.keyed:
                key = (key, group.keyed_values(index))
            if index in group.stood_in and group.failure is None:
                group.failure = "a stood-in member is called again"  # its module would have several calls
            if group.failure is None and any(ran == index for ran, _ in group.records.values()):
                # DiT calls its first block's embedding again from the root: the traced member's graph is then a
                # two-call one (variants, per-call names its subtree's later calls get), not what one call traces
                group.failure = "its traced member is called again"
            if key is None or group.failure is not None or key in group.unfit:
                return original(*args, **kwargs)
            if key not in group.records:
                if any(ran == index for ran, _ in group.records.values()):
                    return original(*args, **kwargs)  # a member that ran already, called again with another key
                return self._record(group, index, original, key, args, kwargs)
            ran, outputs = group.records[key]
            if ran == index or index in {r for r, _ in group.records.values()} or self.recording:
                return original(*args, **kwargs)  # a member that ran for real is never stood in for
            group.stood_in[index] = ran
            written = any(t._version != v for t, v in group.returned.get(key, ()))
            with torch._C.DisableTorchFunction():  # traced below torch functions (export's proxy mode) all the same
                return stand_in(outputs, writable=written)

        return forward

    def _record(self, group: Group, index: int, original: Any, key: Any, args: tuple, kwargs: dict) -> Any:
        module = group.modules[index]
        inputs = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        before = [t._version for t in inputs]
        attrs, versions = _snapshot(module)
        unbacked = _unbacked_made(inputs)
        graph, last = _traced_graph_end()
        self.recording += 1
        try:
            with watching(module, group.watched) as reads:
                out = original(*args, **kwargs)
        finally:
            self.recording -= 1
        why: str | None = _per_member_nodes(graph, last)
        if _unbacked_made(inputs) != unbacked:  # another member's data-dependent sizes are its own symbols
            why = "its call makes data-dependent sizes (unbacked symbols)"
        if reads:
            labels = {(f"{path}.{name}" if path else name): (path, name) for path, name in group.watched}
            new = [pair for pair in dict.fromkeys(labels[r] for r in reads if r in labels) if pair not in group.keyed]
            if new and group.records:  # members recorded already without them in their keys
                why = f"its call reads {reads[0]}, which differs between the alike blocks"
            elif new:  # the first traced call: key every member on them
                group.keyed = (*group.keyed, *new)
                key = (key, group.keyed_values(index))
                if len({repr(group.keyed_values(i)) for i in range(len(group.modules))}) == len(group.modules):
                    # a different value in every member: none can stand in for another, and the members run
                    # for real unrecorded (blocks alike inside them are stood in for)
                    why = f"its call reads {reads[0]}, which differs between the alike blocks"
        leaves, spec = pytree.tree_flatten(out)
        state = [t for t in (*module.parameters(), *module.buffers())]
        recorded = []
        for leaf in leaves:
            if isinstance(leaf, torch.Tensor):
                if any(leaf is t or torch._C._is_alias_of(leaf, t) for t in (*inputs, *state)):
                    why = "an output aliases an input or a parameter/buffer"
                elif _unbacked(leaf.shape):
                    why = "an output size has unbacked symbols"
                recorded.append(output_record(leaf))
            elif isinstance(leaf, SCALARS):
                recorded.append(output_record(leaf))
            else:
                why = f"an output leaf is a {type(leaf).__name__}"
        if [t._version for t in inputs] != before:
            why = "the call mutated an input"
        new_attrs, new_versions = _snapshot(module)
        if new_versions != versions:
            why = "the call mutated a parameter or buffer"
        if new_attrs != attrs:
            why = "the call changed a module attribute"
        if why is not None and group.stood_in:  # the stand-ins given for other keys stay valid
            group.unfit[key] = why
        elif why is not None:
            group.failure = why
        else:
            group.records[key] = (index, (spec, recorded))
            group.returned[key] = [(t, t._version) for t in leaves if isinstance(t, torch.Tensor)]
        return out


def output_record(leaf: Any) -> tuple[Any, ...]:
    """What a stand-in needs of one output leaf: a tensor's metadata (``"t"``, read as :func:`input_key` reads
    it), or a plain scalar (``"c"``)."""
    if isinstance(leaf, torch.Tensor):
        with torch._C.DisableTorchFunction():
            return ("t", tuple(leaf.shape), tuple(leaf.stride()), leaf.dtype, leaf.device, leaf.requires_grad)
    return ("c", leaf)


def stand_in(outputs: tuple[Any, list[Any]], writable: bool = True) -> Any:
    """New tensors (and the scalars) of recorded outputs ``(spec, [output_record(leaf), ...])``, in their
    structure. ``writable``: a tensor requiring grad is not a leaf, like the traced output, so the caller may
    write it in place (``out += x``: one op more per tensor); else a leaf (the export of a caller writing it in
    place then fails, and the model is exported in full: the export stands in writable outputs for a traced
    member whose caller wrote its outputs in place before the next member was called)."""
    spec, recorded = outputs
    leaves = []
    for leaf in recorded:
        if leaf[0] == "t":
            _, size, stride, dtype, device, grad = leaf
            tensor = torch.empty_strided(size, stride, dtype=dtype, device=device, requires_grad=grad)
            if grad and writable:
                tensor = tensor.clone()
                if tuple(tensor.stride()) != tuple(stride):
                    tensor = tensor.as_strided(size, stride)
            leaves.append(tensor)
        else:
            leaves.append(leaf[1])
    return pytree.tree_unflatten(leaves, spec)

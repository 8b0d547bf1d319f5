"""One capture, two levels: the FlatIR derived from ``torch2ir.convert``'s export, without a second one.

``torch2ir.convert`` runs one ``torch.export``; the module-level IR it builds hides the ATen ops of its
handled leaves (an ``nn.Linear`` is one call node), so the FlatIR cannot be rebuilt from the IR alone. The
conversion therefore keeps a :class:`Capture` on the IR it returns (``ir.capture``, in memory only, never in
the JSON): the exported program, the module paths and state names lowering reads, and the link from every
call node of the exported graph to the IR node written for it. :func:`lower` (``torch2ir.lower(ir)``,
``ir.lower()``) walks that program with :mod:`torch2ir.lowering.flat`, and every FlatIR node's ``source`` names its
IR node (``FlatIR.lowered_from()`` is the reverse map).

``torch2ir.lower(model, args, kwargs)`` is convert + lower from the one export. It lowers directly (one export,
no links) only where the conversion's trace is not the model's computation: a whole-model handled leaf (no
export at all) and quantization observers / stubs, which the conversion traces as stand-ins.

A capture describes the IR as converted: :meth:`Capture.lower` refuses an IR changed since (a rewrite), which
it tells by a digest of the IR taken when the conversion finished.
"""

from __future__ import annotations

import hashlib
import marshal
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

from common.capture import no_capture_error
from common.errors import ConversionError, IRError
from common.flat import FlatIR
from common.ir import IR, Implementation
from common.safety import Allowlist
from common.values import Subgraph
from torch2ir.frontend.export import ExportFailedError, export, lean_export
from torch2ir.hierarchy.recover import same_objects
from torch2ir.lowering.flat import check_ops, flat_from_program
from torch2ir.quant.torchao_weights import torchao_weights
from torch2ir.trace_once.lower import Copy, expanded

#: deepcopy of export's tree specs inside run_decompositions warns about a deprecated isinstance check.
_TREESPEC_WARNING = r".*isinstance\(treespec, LeafSpec\)"


class StaleCaptureError(IRError):
    """The IR was changed after its conversion: its capture no longer describes it."""


class Capture:
    """What lowering needs from one conversion's export (see the module docstring).

    Attributes:
        ep: the exported program the IR was built from (its graph is never modified here).
        links: call-node name of ``ep.graph`` -> ``(implementation, node)`` or ``(implementation, node, variant)``.
        paths: the model's ``named_modules()`` paths (aliases included).
        state_names: the model's state-dict keys, parameter and buffer names (aliases and non-persistent ones).
        meta: ``model`` (class), ``torch_version`` and ``device`` of the FlatIR's ``meta``.
        allowlist: the operators the conversion accepted (the FlatIR's ops are checked against it).
        refused: why this trace cannot be lowered (it is not the model's computation), or None.
        digest: the :class:`Seal` of the IR when the conversion finished (None until :meth:`seal`).
    """

    def __init__(self, ep: torch.export.ExportedProgram | None, model: nn.Module, args: tuple,
                 kwargs: Mapping[str, Any] | None, allowlist: Allowlist, refused: str | None = None) -> None:
        self.ep = ep
        self.links: dict[str, tuple] = {}
        self.paths = frozenset(p for p, _ in model.named_modules(remove_duplicate=False))
        self.state_names = frozenset({*model.state_dict(),
                                      *(n for n, _ in model.named_parameters(remove_duplicate=False)),
                                      *(n for n, _ in model.named_buffers(remove_duplicate=False))})
        self.meta = {"model": f"{type(model).__module__}.{type(model).__qualname__}",
                     "torch_version": torch.__version__.split("+")[0],
                     "device": str(trace_device(model, args, kwargs))}
        self.allowlist = allowlist
        self.refused = refused
        self.digest: Seal | None = None
        #: with ``trace_once``: ``(class of alike blocks, why)`` of each group traced in full after all
        self.trace_once_fallbacks: list[tuple[str, str]] = []
        self.opaque: list[tuple[str, str, str]] = []  # opaque leaves: (path, qualified class, why export failed)
        #: with ``trace_once``: how each stand-in is replaced by its traced call when lowering
        self.copies: list[Copy] = []
        #: flat user input -> the earlier one that was the same tensor object
        #: (:func:`torch2ir.hierarchy.recover.same_objects`)
        self.same_input = same_objects(ep, (args, kwargs)) if ep is not None else {}

    def link(self, hierarchy: Any, placed: Mapping[int, tuple[str, int, Implementation]]) -> None:
        """Record each call node's IR node: an op of a handled leaf links to the leaf's call node, an op of a
        module called several times to the node at the same place in the graph its call shares."""
        positions: dict[int, dict[str, int]] = {}
        names: dict[int, list[str]] = {}
        for node in self.ep.graph.nodes:
            if node.op != "call_function":
                continue
            frame = hierarchy.frame_of.get(node)
            entry = hierarchy.origin.get(frame if frame is not None and frame.leaf else node)
            place = placed.get(id(entry[0])) if entry is not None else None
            if place is None:
                continue
            (impl, name), (key, variant, shared) = entry, place
            if shared is not impl:  # written for a later call, run by the graph of an earlier one of its shape
                index = positions.setdefault(id(impl), {n: i for i, n in enumerate(impl.graph.nodes)})
                name = names.setdefault(id(shared), list(shared.graph.nodes))[index[name]]
            self.links[node.name] = (key, name) if variant == 0 else (key, name, variant)

    def seal(self, ir: IR) -> None:
        """Record the digest of the finished IR and attach this capture to it."""
        self.digest = Seal(ir)
        ir.capture = self

    def lower(self, ir: IR | None, *, decompose: bool | Mapping[Any, Any] = False, allow: Iterable[str] | None = None,
              allowlist: Allowlist | None = None) -> FlatIR:
        """The FlatIR of ``ir``, which this capture was sealed on (see :func:`lower`).

        Raises:
            StaleCaptureError: ``ir`` was changed after the conversion.
            ConversionError: this trace cannot be lowered, decomposition failed, the FlatIR cannot hold a
                construct, or an op is outside the allow-list.
        """
        self._check_lowerable()
        if self.digest is None or not self.digest.holds(ir):
            raise StaleCaptureError(
                "the IR was changed after its conversion (a rewrite, or an edit of a graph, state record or "
                "attribute): the capture of its export describes the IR as converted, not this one",
                hint="lower the IR as converted (before rewriting, or a copy), or rebuild the changed IR and lower "
                "the rebuilt model: torch2ir.lower(ir2torch.convert(ir, state), args, kwargs)")
        return self.flat(linked=True, decompose=decompose, allowlist=(allowlist or self.allowlist).extended(allow))

    def flat(self, *, linked: bool, decompose: bool | Mapping[Any, Any], allowlist: Allowlist) -> FlatIR:
        """The FlatIR of the captured program, with ``source`` links when ``linked``, its ops checked against
        ``allowlist`` (no check of an IR: see :meth:`lower`).

        Raises:
            ConversionError: as :meth:`lower`.
        """
        self._check_lowerable()
        whole, links = expanded(self.ep, self.copies, self.links) if self.copies else (self.ep, self.links)
        ep, label = decompose_program(whole, decompose, self.meta["model"])
        meta = {"model": self.meta["model"], "torch_version": self.meta["torch_version"], "decomposition": label,
                "device": self.meta["device"]}
        flat = flat_from_program(ep, self.paths, meta, links=links if linked else None, base=whole.graph)
        check_ops(flat.nodes, allowlist)
        inputs = flat.graph_inputs
        flat.same_inputs = {inputs[i].name: inputs[j].name for i, j in self.same_input.items() if i < len(inputs)}
        # state-dict keys the graph does not read (unused buffers, the second name of a tied parameter): a
        # rebuild with strict=True accepts exactly these besides the weights', and refuses any other key
        flat.meta["unread_state"] = sorted(self.state_names - set(flat.weight_name_mapping.values()))
        return flat

    def _check_lowerable(self) -> None:
        if self.refused is not None or self.ep is None:
            raise ConversionError(f"the conversion's trace cannot be lowered: {self.refused or 'no export ran'}",
                                  hint="lower the model instead: torch2ir.lower(model, args, kwargs)")

    def __deepcopy__(self, memo: dict) -> Capture:
        return self  # shared by copies of the IR (read-only; a copy that is then changed is refused by its digest)

    def __repr__(self) -> str:
        return f"Capture({self.meta['model']}: {len(self.links)} linked ops)"


def lower(
    target: nn.Module | IR,
    args: tuple | Any = None,
    kwargs: Mapping[str, Any] | None = None,
    *,
    decompose: bool | Mapping[Any, Any] = False,
    dynamic_shapes: Any = None,
    allow: Iterable[str] | None = None,
    allowlist: Allowlist | None = None,
    converter: Any = None,
) -> FlatIR:
    """The ATen-level :class:`~common.flat.FlatIR` of an IR from its conversion, or of ``model(*args, **kwargs)``.

    ``lower(ir)`` derives it from the capture ``torch2ir.convert`` kept on ``ir`` (no second export); every
    node's ``source`` names the IR node it came from. ``lower(model, args, kwargs)`` converts and lowers from
    one export (with ``converter``'s handlers, default the default converter's).

    Args:
        target: an IR returned by ``torch2ir.convert``, or the model (may live on ``meta``: no weight is
            allocated).
        args: (model only) positional inputs (a single tensor is taken as ``(tensor,)``); may be on ``meta``.
        kwargs: (model only) keyword inputs.
        decompose: ``False`` keeps export's ATen ops (``aten.linear``, ``aten.layer_norm``); ``True``
            decomposes to the core ATen set; a decomposition table (``{op: fn}``, e.g.
            ``torch.export.default_decompositions()`` with the ops to keep deleted) decomposes through it.
        dynamic_shapes: (model only) as for ``torch.export.export``; symbolic sizes are then recorded as
            strings (``"s0"``) and their ranges in ``range_constraints``.
        allow: operators of other namespaces to accept (``"transformers::grouped_mm_fallback"``,
            ``"quantized_decomposed::*"``), on top of ``allowlist``.
        allowlist: the :class:`~common.safety.Allowlist` the ops must be on (default: the converter's, or for an
            IR the one its conversion used).
        converter: (model only) the ``Torch2Ir`` whose handlers decide the module-level IR.

    Raises:
        NoCaptureError: ``target`` is an IR without a capture (loaded from a file, built by hand).
        StaleCaptureError: ``target`` is an IR changed after its conversion.
        ConversionError: export or decomposition failed, or the graph has constructs the FlatIR
            cannot hold (listed together, each with its node), or ops outside the allow-list.
    """
    if isinstance(target, IR):
        if args is not None or kwargs is not None or dynamic_shapes is not None:
            raise TypeError("lower(ir) takes no inputs or dynamic_shapes: they were fixed when the IR was converted")
        if target.capture is None:
            raise no_capture_error()
        return target.capture.lower(target, decompose=decompose, allow=allow, allowlist=allowlist)
    if not isinstance(target, nn.Module):
        raise TypeError(f"lower takes an IR or an nn.Module, not {type(target).__name__}")
    if args is None:
        raise TypeError("lower(model, args, kwargs) needs the example inputs the model is traced with")
    from torch2ir.converter import get_default_converter
    from torch2ir.hierarchy.build import build_ir
    from torch2ir.train.dropout import TrainModeWarning

    converter = converter or get_default_converter()
    accepted = (allowlist or converter.allowlist).extended(allow)
    args = args if isinstance(args, tuple) else (args,)
    captured: list[Capture] = []
    ir: IR | None = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TrainModeWarning)  # about the IR's train mode; the FlatIR is eval
            ir = build_ir(converter, target, args, kwargs, strict=False, dynamic_shapes=dynamic_shapes,
                          allowlist=accepted, captured=captured, train_checks=False)
    except ExportFailedError:
        raise  # a direct lowering would run the same export
    except ConversionError:
        pass  # the module-level IR cannot hold the model (refused before or after the export): lower it anyway
    capture = captured[0] if captured else None
    if capture is None or capture.refused is not None:  # no export (a whole-model leaf, or refused before it),
        # or a trace with stand-ins: export directly
        return lower_directly(target, args, kwargs, decompose=decompose, dynamic_shapes=dynamic_shapes,
                              allowlist=accepted)
    return capture.flat(linked=ir is not None, decompose=decompose, allowlist=accepted)


def lower_directly(model: nn.Module, args: tuple, kwargs: Mapping[str, Any] | None, *,
                   decompose: bool | Mapping[Any, Any], dynamic_shapes: Any, allowlist: Allowlist) -> FlatIR:
    """Export ``model`` on its own and lower the program (no module-level IR, so no ``source`` links).

    Raises:
        ConversionError: as :func:`lower`.
    """
    weights = torchao_weights(model)
    if weights:  # export would trace through them (access_subclass_inner_tensor, torchao's operators)
        names = ", ".join(f"{p}.{n}" if p else n for p, n, _ in weights[:3])
        raise ConversionError(f"a model with torchao weights ({names}{', ...' if len(weights) > 3 else ''}) cannot be "
                              "lowered: a FlatIR does not carry torchao's tensor subclasses and kernels",
                              key=weights[0][0] or "root",
                              hint="lower the float model before quantize_, or convert (torch2ir.convert) and rebuild")
    ep = export(model, args, kwargs, strict=False, dynamic_shapes=dynamic_shapes, preserve=[])
    return Capture(ep, model, args, kwargs, allowlist).flat(linked=False, decompose=decompose, allowlist=allowlist)


def decompose_program(ep: torch.export.ExportedProgram, decompose: Any, name: str) -> tuple[Any, str]:
    """``ep`` itself (``decompose`` False) or a decomposed copy, and the FlatIR's ``decomposition`` label.

    Raises:
        TypeError: ``decompose`` is neither a bool nor a table.
        ConversionError: ``run_decompositions`` failed.
    """
    if decompose is False or decompose is None:
        return ep, "none"
    if decompose is True:
        table, label = None, "core_aten"
    elif isinstance(decompose, Mapping):
        table, label = dict(decompose), "custom"
    else:
        raise TypeError(f"decompose must be a bool or a decomposition table, not {type(decompose).__name__}")
    try:
        with warnings.catch_warnings(), lean_export():  # the decomposed program is read as a graph, like the export
            warnings.filterwarnings("ignore", message=_TREESPEC_WARNING, category=FutureWarning)
            return ep.run_decompositions(table), label
    except Exception as exc:  # decompositions raise many types; all are reported
        raise ConversionError(f"run_decompositions failed on {name}: {type(exc).__name__}: {exc}",
                              hint="lower without decompose, or keep the failing op out of the table") from exc


def trace_device(model: nn.Module, args: tuple, kwargs: Mapping[str, Any] | None) -> torch.device:
    """The device the trace runs on: the model's first tensor's, else the first input tensor's, else CPU."""
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device
    for leaf in pytree.tree_leaves((args, dict(kwargs or {}))):
        if isinstance(leaf, torch.Tensor):
            return leaf.device
    return torch.device("cpu")


class Seal:
    """What an IR held when its conversion finished, told apart from a later IR without expanding the instances
    of shared bodies: an instance still unexpanded is recorded by its own fields and its body's digest (one per
    body, whatever the number of instances); one expanded since is compared by content with a fresh expansion of
    the body it was sealed with."""

    def __init__(self, ir: IR) -> None:
        self.keys = list(ir)
        self.tensors = sorted(ir.tensors)
        self.content: dict[str, str] = {}  # key -> digest of everything (graphs included)
        self.instances: dict[str, tuple[bytes, str, str, Implementation]] = {}  # key -> own, home, body digest, body
        bodies: dict[int, str] = {}
        for key, impl in ir.items():
            body = impl.shared_body
            if body is None:
                self.content[key] = _impl_hex(key, impl)
            else:
                self.instances[key] = (_own(key, impl), body.name, _body_hex(body, bodies), body)

    def holds(self, ir: IR) -> bool:
        """Whether ``ir`` is the IR sealed (instances expanded since, or not, alike)."""
        if list(ir) != self.keys or sorted(ir.tensors) != self.tensors:
            return False
        bodies: dict[int, str] = {}
        for key, impl in ir.items():
            if key in self.content:
                if _impl_hex(key, impl) != self.content[key]:
                    return False
                continue
            own, home, body_hex, body = self.instances[key]
            shared = impl.shared_body
            if shared is not None:  # still an instance: same own fields, same body
                if shared.name != home or _own(key, impl) != own or _body_hex(shared, bodies) != body_hex:
                    return False
            elif _body_hex(body, bodies) != body_hex or _impl_hex(key, impl) != _expected_hex(key, own, body):
                return False
        return True


def _own(key: str, impl: Implementation) -> bytes:
    """The encoding of an implementation's fields but its graphs (read without expanding an instance)."""
    return _encoded((key, impl.type, impl.data, impl.state, impl.aliases, impl.meta))


def _impl_hex(key: str, impl: Implementation) -> str:
    h = hashlib.blake2b(digest_size=16)
    _digest_impl(h, key, impl)
    return h.hexdigest()


def _body_hex(body: Implementation, cache: dict[int, str]) -> str:
    if id(body) not in cache:
        cache[id(body)] = _impl_hex(body.name, body)
    return cache[id(body)]


def _expected_hex(key: str, own: bytes, body: Implementation) -> str:
    """The digest of instance ``key`` with fields ``own`` expanded from ``body``."""
    h = hashlib.blake2b(digest_size=16)
    h.update(own)
    _digest_graphs(h, Implementation.instance_of(key, body))
    return h.hexdigest()


def _digest_impl(h: Any, key: str, impl: Implementation) -> None:
    h.update(_own(key, impl))
    _digest_graphs(h, impl)


def _digest_graphs(h: Any, impl: Implementation) -> None:
    for graph in impl.graphs():
        h.update(b"graph")
        # the graph's own node and adjacency dicts (networkx's storage; reading them copies nothing)
        h.update(_encoded(graph.graph._node))
        h.update(_encoded(graph.graph._succ))


_MARK = "Subgraph("


def _encoded(value: Any) -> bytes:
    """An exact encoding of ``value``: ``marshal`` for plain data (dicts, lists, strings, numbers, in order),
    else ``repr`` with each :class:`Subgraph` in it replaced by its graph's digest (a Subgraph's repr shows
    counts only; the walk runs only when the repr shows a Subgraph's mark)."""
    try:
        return b"m" + marshal.dumps(value, 2)  # version 2: no references, no interning marks
    except ValueError:  # an object marshal does not write (a dtype, a Subgraph, ...)
        text = repr(value)
        return b"r" + (repr(_plain(value)) if _MARK in text else text).encode()


def _plain(value: Any) -> Any:
    """``value`` with each :class:`Subgraph` replaced by its graph's digest (their repr shows counts only)."""
    if isinstance(value, Subgraph):
        h = hashlib.blake2b(digest_size=16)
        _digest_impl(h, value.impl.name, value.impl)
        return ("Subgraph", h.hexdigest())
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = [_plain(v) for v in value]
        return items if isinstance(value, list) else tuple(items)
    return value

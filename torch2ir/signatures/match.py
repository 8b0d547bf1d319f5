"""Step 2 of the call signatures (:mod:`torch2ir.signatures.record`): the calls the hooks recorded, resolved against
export's graph.

Each recorded call is tied to the innermost frame of its module around the last node it created (through the
stamp export copies with a node's ``meta``, or through the higher-order op whose body holds it), and its
argument and result leaves become graph nodes, constants or :class:`Dead` values.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import _pytree as pytree

from torch2ir.lowering.flat import spec_text
from torch2ir.signatures.record import STAMP, CallRecord, Leaf


@dataclass
class Signature:
    """A recorded call resolved against ``ep.graph``: leaves are fx nodes or constants."""

    names: list[str]
    in_spec: pytree.TreeSpec
    inputs: list[Any]  # fx.Node or constant
    out_spec: pytree.TreeSpec
    outputs: list[Any]
    parameters: list[list[Any]] | None = None
    in_text: str = ""  # the specs as ``treespec_dumps`` writes them
    out_text: str = ""

    def convention(self) -> tuple:
        return (tuple(self.names), self.in_text, self.out_text, repr(self.parameters))


#: Symbolic scalar values a call may pass or return (a size under ``dynamic_shapes``, a data-dependent count).
SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)


class _Nodes:
    """Finds in export's graph the node a tracer node became: itself (export usually keeps the tracer's graph),
    else the node carrying its stamp in the copy export made."""

    def __init__(self, graph: Any) -> None:
        self.graph = graph
        self.by_stamp: dict[int, Any] = {}
        self._expressions: dict[tuple[type, Any], Any] | None = None
        self.inside: dict[int, Any] = {}  # stamp of a node in a higher-order op's body -> the op's node
        for node in graph.nodes:
            stamp = node.meta.pop(STAMP, None)
            if stamp is not None:
                self.by_stamp.setdefault(stamp, node)
            for body in _bodies(node):
                for stamp in _body_stamps(body):
                    self.inside.setdefault(stamp, node)

    def frame_node(self, node: Any) -> Any:
        """The node of the graph that ran ``node``: itself or its copy, else the higher-order op whose body
        holds it (export moves the ops of a ``no_grad`` region into one); None when it is gone."""
        found = self.find(node)
        return found if found is not None else self.inside.get(node.meta.get(STAMP, -1))

    def by_expression(self, value: Any) -> Any:
        """The first node of the graph computing the symbolic ``value`` (the same expression), else None."""
        if self._expressions is None:
            self._expressions = {}
            for node in self.graph.nodes:
                val = node.meta.get("val")
                if isinstance(val, SYMBOLIC) and val.node.is_symbolic():
                    self._expressions.setdefault((type(val), val.node.expr), node)
        return self._expressions.get((type(value), value.node.expr)) if value.node.is_symbolic() else None

    def find(self, node: Any) -> Any:
        if node.graph is self.graph:
            return None if node._erased else node
        return self.by_stamp.get(node.meta.get(STAMP, -1))

    def resolve(self, leaves: list[Leaf]) -> list[Any] | None:
        """The leaves as nodes of the graph, constants and :class:`Dead` values (a tensor export dropped as dead
        code); None when a node holds another value or a dropped tensor's shape is symbolic."""
        out: list[Any] = []
        for kind, value in leaves:
            if kind == "const":
                out.append(value)
                continue
            if kind == "unknown":
                return None
            node = self.find(value)
            if node is None and isinstance(value.meta.get("val"), SYMBOLIC):
                node = self.by_expression(value.meta["val"])  # export makes its size nodes anew
                if node is None:
                    return None
            if node is None or is_stand_in(node):
                val = value.meta.get("val")
                if not isinstance(val, torch.Tensor) or not val.dtype.is_floating_point or \
                        not all(type(d) is int for d in val.shape):
                    return None
                out.append(Dead(value, list(val.shape), val.dtype))
                continue
            if not isinstance(node.meta.get("val"), (torch.Tensor, *SYMBOLIC)):
                return None
            out.append(node)
        return out


@dataclass(eq=False)
class Dead:
    """A floating-point tensor a call passed or returned that no op uses, so export dropped the ops computing it
    (ALiBi Falcon's rotary embeddings). The signature keeps its place: the graph writer binds it like a value
    where a call returns it and, where nothing does, passes a stand-in of the same shape and dtype filled with
    NaN (a module swapped in that does use it gives NaN, never plausible numbers)."""

    node: Any  # the tracer's node, the same object wherever the tensor went
    shape: list[int]
    dtype: torch.dtype


def is_stand_in(node: Any) -> bool:
    """Whether ``node`` is a stand-in the graph writer made for a :class:`Dead` value (a NaN-filled ``full``
    nothing uses), met again when a rebuilt model is converted: it stays :class:`Dead`, so the IR is the same."""
    return node.op == "call_function" and node.target is torch.ops.aten.full.default and not node.users and \
        len(node.args) == 2 and isinstance(node.args[1], float) and node.args[1] != node.args[1]


def _bodies(node: Any) -> list[Any]:
    """The graphs of the higher-order-op bodies ``node`` calls (``get_attr`` arguments naming graph modules)."""
    if node.op != "call_function" or not isinstance(node.target, torch._ops.HigherOrderOperator):
        return []
    root = node.graph.owning_module
    out = []
    for arg in node.args:
        if isinstance(arg, torch.fx.Node) and arg.op == "get_attr" and root is not None:
            body = getattr(root, arg.target, None)
            if isinstance(body, torch.fx.GraphModule):
                out.append(body.graph)
    return out


def _body_stamps(graph: Any) -> Iterator[int]:
    """The stamps of the nodes of a body graph and of the bodies nested in it (read, not removed: a body's node
    may share its ``meta`` with the tracer's node and with a copy in the outer graph)."""
    for node in graph.nodes:
        stamp = node.meta.get(STAMP)
        if stamp is not None:
            yield stamp
        for body in _bodies(node):
            yield from _body_stamps(body)


def _plain(spec: pytree.TreeSpec, keyed: bool = False) -> bool:
    """Structures a call node can carry as they are: tuples, lists, str-keyed dicts, None and leaves, and among
    arguments a ``torch.Size`` of symbolic sizes (built by a ``torch.Size`` node); for results (``keyed``) any
    registered container whose items are unpacked by position, dicts by key."""
    if spec.is_leaf():
        return True
    if spec.type in (dict, collections.OrderedDict):
        ok = all(isinstance(k, str) for k in spec.context)
    elif spec.type is torch.Size and not keyed:  # sizes with symbolic items: the caller builds a torch.Size
        ok = all(c.is_leaf() for c in spec.children())
    else:
        ok = keyed or spec.type in (tuple, list, type(None))
    return ok and all(_plain(c, keyed) for c in spec.children())


def match_calls(graph: Any, frame_of: dict[Any, Any], module_of: Any, calls: list[CallRecord]) -> dict[int, Signature]:
    """``{id(frame): Signature}`` for every recorded call whose frame and leaves are found in ``graph``.

    ``module_of(frame)`` is the module a frame calls. A call is tied to the innermost frame of its module
    around the last node the call created; calls that created no node, or whose values cannot be found (dead
    code), are left out (their frames keep data-flow inputs and outputs).
    """
    from common.errors import IRSerializationError
    from common.values import encode

    nodes = _Nodes(graph)
    out: dict[int, Signature] = {}
    for rec in calls:
        node = next((m for m in map(nodes.frame_node, rec.created) if m is not None and m in frame_of), None)
        if node is None or rec.names is None or rec.out_spec is None:
            continue
        frame = next((f for f in frame_of[node].chain() if f.path and module_of(f) is not None
                      and id(module_of(f)) == rec.module_id), None)
        if frame is None or frame.leaf or id(frame) in out:
            continue
        inputs = nodes.resolve(rec.in_leaves)
        outputs = nodes.resolve(rec.out_leaves)
        if inputs is None or outputs is None or not _plain(rec.out_spec, keyed=True) or not _plain(rec.in_spec):
            continue
        try:
            encode([v for v in (*inputs, *outputs) if not isinstance(v, (torch.fx.Node, Dead))], "signature")
            texts = [spec_text(spec) for spec in (rec.in_spec, rec.out_spec)]  # repeated layers share theirs
        except (IRSerializationError, TypeError, ValueError, NotImplementedError):
            continue
        out[id(frame)] = Signature(rec.names, rec.in_spec, inputs, rec.out_spec, outputs, rec.parameters, *texts)
    return out

"""Matching of :func:`common.rewrite.replace_pattern`: the ATen op an IR node computes (:func:`node_op`) and a
traced pattern found in one graph (:class:`PatternMatcher`), one output or several.

A pattern of several outputs is matched the way ``torch.fx.subgraph_rewriter`` matches one: its first output is
anchored at a node, each further output at any node computing the same op, backtracking over the choices, with
the pattern's inputs bound to one value each wherever they are used; every matched node that is not one of the
outputs must be read inside the match only.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torch import fx

from common.ir import IR, Implementation
from common.values import Ref, values_equal

from .pattern_trace import Traced

#: IR types of handled activation modules that match as one ATen op: ``{type: (op, {module attribute: keyword})}``
#: (a keyword mapped to ``None`` must have its default value: ``inplace`` must be false).
LEAF_OPS: dict[str, tuple[str, dict[str, str | None]]] = {
    "relu": ("aten.relu.default", {"inplace": None}),
    "silu": ("aten.silu.default", {"inplace": None}),
    "mish": ("aten.mish.default", {"inplace": None}),
    "hardswish": ("aten.hardswish.default", {"inplace": None}),
    "hardsigmoid": ("aten.hardsigmoid.default", {"inplace": None}),
    "sigmoid": ("aten.sigmoid.default", {}),
    "tanh": ("aten.tanh.default", {}),
    "gelu": ("aten.gelu.default", {"approximate": "approximate"}),
}
_LEAF_DEFAULTS = {"inplace": False, "approximate": "none"}
#: IR types of handled leaves with parameters that match as one ATen op of their input and their parameters:
#: ``{type: (op, parameter names in argument order)}`` (``nn.Linear``: ``aten.linear.default(x, weight, bias)``,
#: without ``bias`` when it has none).
STATE_OPS: dict[str, tuple[str, tuple[str, ...]]] = {
    "linear": ("aten.linear.default", ("weight", "bias")),
}


@dataclass(frozen=True)
class StateValue:
    """A parameter or buffer of a handled leaf as a matched value: ``key`` the module's implementation key,
    ``name`` the tensor's name in it, ``path`` the attribute path the graph reads it by (``query.weight``)."""

    key: str
    name: str
    path: str


def _leaf_path(attrs: Mapping[str, Any], key: str, owner: str | None) -> str | None:
    """The attribute path by which the graph of ``owner`` reaches the module ``key`` its call node calls."""
    target = attrs.get("target")
    if isinstance(target, str):
        return target
    if owner is None:
        return None
    if owner == "root":
        return key
    return key[len(owner) + 1:] if key.startswith(owner + ".") else None


def node_op(ir: IR | None, attrs: Mapping[str, Any],
            owner: str | None = None) -> tuple[str, list[Any], dict[str, Any]] | None:
    """``(op, args, kwargs)`` a node computes, for matching: a function node's own; a call of a handled activation
    of :data:`LEAF_OPS` (with one argument), that op with the module's non-default attributes as keywords; a call
    of a handled leaf of :data:`STATE_OPS` in the graph of ``owner``, that op of its argument and its parameters
    (:class:`StateValue`); else ``None``."""
    args, kwargs = list(attrs.get("args", [])), dict(attrs.get("kwargs", {}))
    if attrs.get("type") == "function":
        return str(attrs.get("implementation")), args, kwargs
    kind = str(attrs.get("type"))
    target = attrs.get("implementation")
    if ir is None or not isinstance(target, str) or target not in ir or len(args) != 1 or kwargs:
        return None
    module = ir[target]
    if module.node_count or module.type != kind:
        return None
    if kind in STATE_OPS:
        return _state_op(module, attrs, target, owner, args)
    leaf = LEAF_OPS.get(kind)
    if leaf is None:
        return None
    op, keywords = leaf
    for attribute, value in module.data.items():
        if attribute not in keywords:
            return None  # an attribute this table does not know: not this op
        if value != _LEAF_DEFAULTS.get(attribute):
            keyword = keywords[attribute]
            if keyword is None:
                return None  # in place: changes its input too
            kwargs[keyword] = value
    return op, args, kwargs


def _state_op(module: Any, attrs: Mapping[str, Any], key: str, owner: str | None,
              args: list[Any]) -> tuple[str, list[Any], dict[str, Any]] | None:
    op, names = STATE_OPS[str(module.type)]
    path = _leaf_path(attrs, key, owner)
    if path is None or module.variants:
        return None
    present = [n for n in names if n in module.state]
    if present != list(names[:len(present)]) or set(module.state) != set(present) or not present:
        return None  # other tensors than the op reads (or a gap in its arguments): not this op
    return op, [*args, *(StateValue(key, n, f"{path}.{n}") for n in present)], {}


class PatternMatcher:
    """Matches one traced pattern in one graph (see the module docstring)."""

    def __init__(self, pattern: Traced, graph: Implementation, ir: IR | None = None, owner: str | None = None) -> None:
        self.pattern = pattern
        self.graph = graph
        self.ir = ir
        self.owner = owner
        self.computed = {n: node_op(ir, graph.node(n), owner) for n in graph.nodes}
        self.output_set = set(pattern.outputs)
        self.readers = {n: [u for u in n.users if u.op == "call_function"] for n in pattern.calls}
        self.by_op: dict[str, list[str]] = {}
        for name, computed in self.computed.items():
            if computed is not None:
                self.by_op.setdefault(computed[0], []).append(name)

    def at(self, anchor: str, forbidden: set[str] | frozenset[str] = frozenset()
           ) -> tuple[dict[fx.Node, str], dict[fx.Node, Any], list[Ref]] | None:
        """``(pattern call -> IR node, pattern input -> IR value, IR value of each output)`` of a match whose first
        output is ``anchor`` and which holds no node of ``forbidden``."""
        self.calls: dict[fx.Node, str] = {}
        self.taken: dict[str, fx.Node] = {}
        self.inputs: dict[fx.Node, Any] = {}
        self.forbidden = forbidden
        self.outs: list[Ref] = []
        first = self.pattern.outputs[0]
        value = Ref(anchor)
        if first.target is operator.getitem and (self.computed.get(anchor) or ("",))[0] != "operator.getitem":
            return None  # an item of a module call's result is not an op the pattern computes
        if not self._node(first, value) or not self._closed():
            return None
        self.outs.append(value)
        return self._rest(1)

    def _rest(self, i: int) -> tuple[dict[fx.Node, str], dict[fx.Node, Any], list[Ref]] | None:
        outputs = self.pattern.outputs
        if i == len(outputs):
            return self._finish()
        pnode = outputs[i]
        if pnode in self.calls:  # an output another output reads: matched already
            self.outs.append(Ref(self.calls[pnode]))
            return self._rest(i + 1)
        op = "operator.getitem" if pnode.target is operator.getitem else self.pattern.names[pnode]
        for name in self.by_op.get(op, []):
            if name in self.taken:
                continue
            saved = dict(self.calls), dict(self.taken), dict(self.inputs), list(self.outs)
            if self._node(pnode, Ref(name)) and self._closed():
                self.outs.append(Ref(name))
                hit = self._rest(i + 1)
                if hit is not None:
                    return hit
            self.calls, self.taken, self.inputs, self.outs = saved
        return None

    def _closed(self) -> bool:
        """No matched inner node whose pattern readers are all matched is read by anything else: checked after each
        output, so a choice that cannot give a match is dropped before the next output is tried."""
        inside = set(self.calls.values())
        for pnode, name in self.calls.items():
            if pnode in self.output_set or not all(u in self.calls for u in self.readers[pnode]):
                continue
            if any(user not in inside for user in self.graph.graph._succ[name]):
                return False
        return True

    def _finish(self) -> tuple[dict[fx.Node, str], dict[fx.Node, Any], list[Ref]] | None:
        if set(self.inputs) != set(self.pattern.inputs):
            return None  # a pattern input no output depends on
        inside = set(self.calls.values())
        results = {ref.node for ref in self.outs}
        for name in inside - results:
            if any(user not in inside for user in self.graph.graph._succ[name]):
                return None  # an inner value is read outside the match
        return self.calls, self.inputs, list(self.outs)

    def _node(self, pnode: fx.Node, value: Any) -> bool:
        if pnode.op == "placeholder":
            if not isinstance(value, (Ref, StateValue)):
                return False
            bound = self.inputs.setdefault(pnode, value)
            return bound == value
        if not isinstance(value, Ref):
            return False
        if pnode.target is operator.getitem:
            source, index = pnode.args
            if value.index is not None:
                return value.index == index and self._node(source, Ref(value.node))
            return self._item(pnode, value.node, source, index)
        if value.index is not None:
            return False
        if pnode in self.calls:
            return self.calls[pnode] == value.node
        if value.node in self.taken or value.node in self.forbidden:
            return False
        computed = self.computed.get(value.node)
        if computed is None or computed[0] != self.pattern.names[pnode]:
            return False
        _, args, kwargs = computed
        if len(args) != len(pnode.args) or set(kwargs) != set(pnode.kwargs):
            return False
        self.calls[pnode] = value.node
        self.taken[value.node] = pnode
        return all(self._arg(p, v) for p, v in zip(pnode.args, args)) and \
            all(self._arg(pnode.kwargs[k], kwargs[k]) for k in pnode.kwargs)

    def _item(self, pnode: fx.Node, name: str, source: fx.Node, index: int) -> bool:
        """An item of a multi-result op, written as an ``operator.getitem`` function node (as a conversion does)."""
        if pnode in self.calls:
            return self.calls[pnode] == name
        if name in self.taken or name in self.forbidden:
            return False
        computed = self.computed.get(name)
        if computed is None or computed[0] != "operator.getitem" or computed[2] or len(computed[1]) != 2:
            return False
        src, got = computed[1]
        if not isinstance(src, Ref) or src.index is not None or type(got) is not int or got != index:
            return False
        self.calls[pnode] = name
        self.taken[name] = pnode
        return self._node(source, src)

    def _arg(self, pattern: Any, value: Any) -> bool:
        if isinstance(pattern, fx.Node):
            return self._node(pattern, value)
        if isinstance(pattern, (list, tuple)):
            return isinstance(value, (list, tuple)) and len(value) == len(pattern) and \
                all(self._arg(p, v) for p, v in zip(pattern, value))
        if isinstance(value, (Ref, StateValue)):
            return False
        return values_equal(pattern, value) or (type(pattern) is type(value) and pattern == value)


__all__ = ["LEAF_OPS", "STATE_OPS", "PatternMatcher", "StateValue", "node_op"]

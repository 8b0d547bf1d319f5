"""Splicing of :func:`common.rewrite.replace_pattern`: the matches of one graph replaced by the replacement's
calls, as a conversion would write them (names numbered in graph order, one ``get_attr`` per state tensor read
right before its first reader, items of a multi-result op as ``operator.getitem`` nodes), each new node with
the shape and dtype it computes."""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from torch import fx

from common.ir import IR, Implementation
from common.names import without_counter
from common.values import Ref

from .core import edges_of, fresh_name, map_refs, ordered, rebuild_graph
from .ops import in_order
from .pattern_match import StateValue
from .pattern_trace import Traced, replacement_metas, value_meta


@dataclass
class Found:
    """One match to replace: its matched IR nodes, the value each pattern input binds (in the pattern's argument
    order) and the value of each pattern output (in its return order)."""

    inside: set[str]
    inputs: list[Any]
    outputs: list[Ref]

    def place(self, order: Mapping[str, int]) -> str:
        """The node whose place the replacement takes: the first output in graph order."""
        return min((ref.node for ref in self.outputs), key=order.__getitem__)

    def placeable(self, graph: Implementation, order: Mapping[str, int]) -> bool:
        """Every value the replacement reads is computed before :meth:`place`, or is a state read (a ``get_attr``
        node, which moves up to its new first reader). A match of several outputs whose later output reads a value
        computed after its first is not replaced: other nodes would have to move."""
        at = order[self.place(order)]
        return all(order[v.node] < at or _moves(graph, v) for v in self.inputs if isinstance(v, Ref))


def _moves(graph: Implementation, value: Ref) -> bool:
    """A value read by a ``get_attr`` node: it can move up (a read of a tensor computes nothing)."""
    return value.index is None and graph.node(value.node).get("type") == "get_attr"


def input_meta(ir: IR, graph: Implementation, value: Any) -> Any:
    """The recorded ``{"shape", "dtype"}`` of a matched input value (a graph value or a leaf's state tensor)."""
    if isinstance(value, StateValue):
        record = ir[value.key].state.get(value.name, {})
        return {"shape": list(record.get("shape", [])), "dtype": record.get("dtype")} if "dtype" in record else None
    return value_meta(ir, graph, value)


def splice(ir: IR, graph: Implementation, key: str, found: list[Found],
           rep_for: Callable[[list[Any]], Traced]) -> None:
    """Replace each match of one graph by the replacement's calls, traced for the shapes and dtypes of the values
    it binds (``rep_for``), at the place of its first output."""
    nodes, edges = ordered(graph)
    order = {n: i for i, (n, _) in enumerate(nodes)}
    removed = set().union(*(f.inside for f in found))
    taken = {n for n, _ in nodes if n not in removed}
    emitted: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    redirect: dict[str, Ref] = {}
    moved: set[str] = set()
    for match in sorted(found, key=lambda f: order[f.place(order)]):
        at = match.place(order)
        reads = {a["implementation"]: n for n, a in nodes
                 if a.get("type") == "get_attr" and n not in removed and order[n] < order[at]}
        bound = [input_meta(ir, graph, v) for v in match.inputs]
        rep = rep_for(bound)
        metas = replacement_metas(rep, bound, key, at)
        # a value an earlier match computed (a chain of matches) is read from that match's replacement; a state read
        # whose first reader is now in the replacement moves to just before that reader, as a conversion writes it
        inputs = [redirect.get(v.node, v) if isinstance(v, Ref) and v.index is None else v for v in match.inputs]
        for i, v in enumerate(inputs):
            if isinstance(v, Ref) and v.node in order and v.node not in moved and _moves(graph, v) and \
                    all(u in match.inside or order[u] > order[at] for u in graph.graph._succ[v.node]):
                moved.add(v.node)
                inputs[i] = _Moved(v.node, dict(graph.node(v.node)))
        emit = _Emitter(ir, graph, taken, reads, dict(zip(rep.inputs, inputs)))
        for rnode in rep.calls:
            args = _template(rnode.args, emit.value)
            kwargs = _template(dict(rnode.kwargs), emit.value)
            implementation = "operator.getitem" if rnode.target is operator.getitem else rep.names[rnode]
            node_attrs: dict[str, Any] = {"type": "function", "implementation": implementation,
                                          "args": list(args), "kwargs": dict(kwargs)}
            if metas.get(rnode) is not None:
                node_attrs["meta"] = metas[rnode]
            emit.env[rnode] = Ref(emit.add(without_counter(rnode.name), node_attrs))
        for old, out in zip(match.outputs, rep.outputs):
            redirect[old.node] = emit.value(out)
        emitted[at] = emit.new
    new_nodes: list[tuple[str, dict[str, Any]]] = []
    for name, attrs in nodes:
        new_nodes += emitted.get(name, [])
        if name in removed or name in moved:
            continue
        for f in ("args", "kwargs"):
            if f in attrs:
                attrs[f] = map_refs(attrs[f], lambda r: redirect.get(r.node, r) if r.index is None else r)
        new_nodes.append((name, attrs))
    new_edges = []
    for u, v, d in edges:
        if v in removed:
            continue
        if u in redirect:
            target = redirect[u]
            d = {k: x for k, x in d.items() if k != "src_index"}
            if target.index is not None:
                d["src_index"] = target.index
            u = target.node
        new_edges.append((u, v, d))
    for group in emitted.values():
        for name, attrs in group:
            new_edges += edges_of(name, attrs)
    bases = {without_counter(n) for n in removed} | {without_counter(n) for g in emitted.values() for n, _ in g}
    new_nodes, new_edges = _renumber(new_nodes, new_edges, bases)
    rebuild_graph(graph, new_nodes, in_order(new_edges, new_nodes))


@dataclass(frozen=True)
class _Moved:
    """A ``get_attr`` node of the graph that moves up into a replacement, written before its first reader there."""

    name: str
    attrs: dict[str, Any]


class _Emitter:
    """The nodes one match's replacement adds, named apart from ``taken``; a state tensor (a leaf's parameter a
    pattern argument bound) is read by a ``get_attr`` node written before its first reader, unless the graph reads
    it before already (``reads``: path -> node)."""

    def __init__(self, ir: IR, graph: Implementation, taken: set[str], reads: dict[str, str],
                 env: dict[fx.Node, Any]) -> None:
        self.ir, self.graph, self.taken, self.reads = ir, graph, taken, reads
        self.env = env  # replacement node -> IR value (a Ref, or a StateValue until it is read)
        self.new: list[tuple[str, dict[str, Any]]] = []

    def add(self, base: str, attrs: dict[str, Any]) -> str:
        name = fresh_name(self.taken, base)
        self.taken.add(name)
        self.new.append((name, attrs))
        return name

    def value(self, node: fx.Node) -> Ref:
        """The IR value of a replacement node or input."""
        got = self.env[node]
        if isinstance(got, _Moved):
            self.new.append((got.name, got.attrs))
            got = self.env[node] = Ref(got.name)
        if isinstance(got, StateValue):
            name = self.reads.get(got.path)
            if name is None:
                name = self.add(got.path.replace(".", "_"), {"type": "get_attr", "implementation": got.path,
                                                             "meta": input_meta(self.ir, self.graph, got)})
                self.reads[got.path] = name
            got = self.env[node] = Ref(name)
        return got


def _template(value: Any, lookup: Callable[[fx.Node], Ref]) -> Any:
    """A replacement node's argument as an IR argument: nodes become the references ``lookup`` gives."""
    if isinstance(value, fx.Node):
        return lookup(value)
    if isinstance(value, (list, tuple)):
        return [_template(v, lookup) for v in value]
    if isinstance(value, dict):
        return {k: _template(v, lookup) for k, v in value.items()}
    return value


def _renumber(nodes: list[tuple[str, dict[str, Any]]], edges: list[tuple[str, str, dict[str, Any]]],
              bases: set[str]) -> tuple[list[tuple[str, dict[str, Any]]], list[tuple[str, str, dict[str, Any]]]]:
    """Function nodes whose names share a base with a removed or new node, numbered again in graph order
    (``mul``, ``mul_1``...) as a conversion numbers them."""
    moving = [n for n, a in nodes if a.get("type") == "function" and without_counter(n) in bases]
    fixed = {n for n, _ in nodes} - set(moving)
    rename: dict[str, str] = {}
    for name in moving:
        new = fresh_name(fixed, without_counter(name))
        fixed.add(new)
        rename[name] = new
    if all(k == v for k, v in rename.items()):
        return nodes, edges
    out_nodes = []
    for name, attrs in nodes:
        for f in ("args", "kwargs"):
            if f in attrs:
                attrs[f] = map_refs(attrs[f], lambda r: Ref(rename.get(r.node, r.node), r.index))
        out_nodes.append((rename.get(name, name), attrs))
    return out_nodes, [(rename.get(u, u), rename.get(v, v), d) for u, v, d in edges]


__all__ = ["Found", "input_meta", "splice"]

"""Shared pieces of the rewrite primitives: errors, node references, matches, graph surgery helpers.

Graph edits rebuild a graph from an ordered node list and an ordered edge list, so node order
(execution order) and the order of each node's in-edges (the order of slotless arguments) come
out exactly as intended; ``Ref`` placeholders are rewritten together with the edges they mirror.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import networkx as nx

from common.errors import IRValidationError
from common.ir import IR, NODE_KINDS, Implementation
from common.schema import fix_slotless_order
from common.values import Ref, Subgraph, iter_refs

Where = str | Callable[[str], bool] | None


class RewriteError(IRValidationError):
    """A rewrite does not apply here, or its result would be invalid; names the node or implementation."""


class PatternNotFoundError(RewriteError):
    """A pattern (or a node it names) is not in the IR."""


@dataclass(frozen=True)
class NodeRef:
    """A node of one graph: ``implementation`` owns the graph, ``variant`` picks a per-call graph (0: main)."""

    implementation: str
    node: str
    variant: int = 0

    def __str__(self) -> str:
        where = self.implementation + (f"[variant {self.variant}]" if self.variant else "")
        return f"{where}:{self.node}"


@dataclass(frozen=True)
class Match:
    """What :func:`common.rewrite.find` found: the matched ``nodes`` in data-flow order and, for each,
    the key of the implementation it calls (``None`` for a function node)."""

    nodes: tuple[NodeRef, ...]
    implementations: tuple[str | None, ...]

    @property
    def graph(self) -> tuple[str, int] | None:
        """``(implementation key, variant)`` of the graph holding every node, or ``None`` if the match
        crosses module boundaries."""
        graphs = {(ref.implementation, ref.variant) for ref in self.nodes}
        return next(iter(graphs)) if len(graphs) == 1 else None

    @property
    def crosses_modules(self) -> bool:
        """Whether the nodes lie in more than one graph."""
        return self.graph is None


def matches_where(where: Where, key: str) -> bool:
    """Whether implementation ``key`` is selected by ``where`` (``None``: all; a glob; a predicate)."""
    if where is None:
        return True
    if callable(where):
        return bool(where(key))
    return fnmatch.fnmatchcase(key, where)


def graph_of(ir: IR, ref: NodeRef) -> Implementation:
    """The graph (an :class:`Implementation` or one of its variants) holding ``ref``.

    Raises:
        PatternNotFoundError: no such implementation, variant or node.
    """
    if ref.implementation not in ir:
        raise PatternNotFoundError(f"no implementation {ref.implementation!r}", implementation=ref.implementation,
                                   hint="name the implementation whose graph holds the node")
    graphs = ir[ref.implementation].graphs()
    if not 0 <= ref.variant < len(graphs):
        raise PatternNotFoundError(f"no graph variant {ref.variant}", implementation=ref.implementation,
                                   hint=f"variants are 0..{len(graphs) - 1}")
    graph = graphs[ref.variant]
    if ref.node not in graph.graph:
        raise PatternNotFoundError("no such node", implementation=ref.implementation, node=ref.node,
                                   hint="see ir[key].nodes for the node names, or use common.rewrite.find")
    return graph


def all_graphs(ir: IR) -> Iterable[tuple[str, int, Implementation]]:
    """``(implementation key, variant, graph)`` of every graph of ``ir``."""
    for key, impl in ir.items():
        for variant, graph in enumerate(impl.graphs()):
            yield key, variant, graph


def call_sites(ir: IR) -> dict[str, list[NodeRef]]:
    """``{callee key: [call nodes]}`` over every graph and variant."""
    out: dict[str, list[NodeRef]] = {}
    for key, variant, graph in all_graphs(ir):
        for name, attrs in graph.graph.nodes(data=True):
            target = attrs.get("implementation")
            if attrs.get("type") not in NODE_KINDS and isinstance(target, str):
                out.setdefault(target, []).append(NodeRef(key, name, variant))
    return out


def callee(attrs: Mapping[str, Any]) -> str | None:
    """The implementation a node calls, or ``None`` for input/output/function/get_attr nodes."""
    target = attrs.get("implementation")
    return target if attrs.get("type") not in NODE_KINDS and isinstance(target, str) else None


def is_under(key: str, owner: str) -> bool:
    """Whether implementation ``key`` hangs below ``owner`` (everything hangs below ``"root"``)."""
    return owner == "root" or key.startswith(owner + ".")


def subtree(ir: IR, key: str) -> list[str]:
    """``key`` and every implementation key below it, in IR order."""
    return [k for k in ir if k == key or k.startswith(key + ".")]


def map_refs(value: Any, fn: Callable[[Ref], Ref]) -> Any:
    """``value`` (nested args/kwargs) with every :class:`Ref` replaced by ``fn(ref)``."""
    if isinstance(value, Ref):
        return fn(value)
    if isinstance(value, list):
        return [map_refs(v, fn) for v in value]
    if isinstance(value, tuple):
        return tuple(map_refs(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: map_refs(v, fn) for k, v in value.items()}
    if isinstance(value, Subgraph):
        return value  # a body's refs name its own nodes
    return value


def compose_index(outer: int | None, inner: int | None, where: NodeRef) -> int | None:
    """The output index a consumer reads after a pass-through node is bypassed: it read item ``outer``
    of the node, which forwarded item ``inner`` of its input.

    Raises:
        RewriteError: both are set (an item of an item cannot be one edge).
    """
    if outer is None:
        return inner
    if inner is None:
        return outer
    raise RewriteError(f"a consumer reads item {outer} of the node, whose input is itself item {inner} of another "
                       "node: one edge cannot say both", implementation=where.implementation, node=where.node,
                       hint="rewrite the consumer by hand, or pick another node")


def rebuild_graph(graph: Implementation, nodes: list[tuple[str, dict[str, Any]]],
                  edges: list[tuple[str, str, dict[str, Any]]]) -> None:
    """Replace ``graph.graph`` by nodes (in order) and edges (each destination's in order).

    Where networkx would group a node's slotless in-edges differently (two edges from one source
    around another), those edges get explicit positional slots in the intended order.
    """
    graph.graph = nx.MultiDiGraph()
    for name, attrs in nodes:
        graph.graph.add_node(name)
        graph.graph.nodes[name].update(attrs)
    slotless: dict[str, int] = {}
    for src, dst, attrs in edges:
        graph.graph.add_edge(src, dst, **attrs)
        if attrs.get("slot") is None:
            slotless[dst] = slotless.get(dst, 0) + 1
    fix_slotless_order(graph, [(s, d, a) for s, d, a in edges], slotless)


def ordered(graph: Implementation) -> tuple[list[tuple[str, dict[str, Any]]], list[tuple[str, str, dict[str, Any]]]]:
    """Copies of the nodes (in order) and edges (grouped by destination, in in-edge order) of a graph."""
    nodes = [(n, dict(a)) for n, a in graph.graph.nodes(data=True)]
    edges = [(u, v, dict(d)) for u, v, _, d in graph._ordered_edges()]
    return nodes, edges


def topo_order(nodes: list[tuple[str, dict[str, Any]]], edges: list[tuple[str, str, dict[str, Any]]],
               rank: Mapping[str, float], where: str) -> list[tuple[str, dict[str, Any]]]:
    """``nodes`` sorted so every edge runs forward, keeping ``rank`` order wherever it can.

    Raises:
        RewriteError: the edges form a cycle (the rewrite would feed a node its own output).
    """
    g = nx.DiGraph()
    g.add_nodes_from(name for name, _ in nodes)
    g.add_edges_from((u, v) for u, v, _ in edges)
    try:
        names = list(nx.lexicographical_topological_sort(g, key=lambda n: rank[n]))
    except nx.NetworkXUnfeasible:
        raise RewriteError("the rewrite would make the graph cyclic", implementation=where,
                           hint="a matched subgraph must not feed its own inputs through nodes outside it") from None
    attrs = dict(nodes)
    return [(n, attrs[n]) for n in names]


def edges_of(name: str, attrs: Mapping[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """One edge per reference in a node's arguments (the slot is the reference's path)."""
    out = []
    for path, ref in [*iter_refs(list(attrs.get("args", []))), *iter_refs(dict(attrs.get("kwargs", {})))]:
        edge: dict[str, Any] = {"slot": path if len(path) > 1 else path[0]}
        if ref.index is not None:
            edge["src_index"] = ref.index
        out.append((ref.node, name, edge))
    return out


def fresh_name(taken: Iterable[str], base: str) -> str:
    """``base``, or ``base_1``, ``base_2``, ... whichever is not in ``taken``."""
    taken = set(taken)
    if base not in taken:
        return base
    n = 1
    while f"{base}_{n}" in taken:
        n += 1
    return f"{base}_{n}"


def position_after(keys: list[str], key: str) -> int:
    """Index right after ``key`` and everything below it in ``keys`` (``len(keys)`` if absent)."""
    last = -1
    for i, k in enumerate(keys):
        if k == key or k.startswith(key + ".") or key == "root":
            last = i
    return last + 1 if last >= 0 else len(keys)


__all__ = ["Match", "NodeRef", "PatternNotFoundError", "RewriteError", "Where", "call_sites", "graph_of",
           "matches_where", "rebuild_graph"]

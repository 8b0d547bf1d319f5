"""``find``: chains of nodes matching a pattern of node / implementation types, on the whole hierarchy."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

from common.ir import IR
from common.values import Ref

from .core import Match, NodeRef, Where, all_graphs, call_sites, callee, graph_of, matches_where

#: One element of a pattern: a node type (``"conv2d"``, ``"function"``) or function target
#: (``"aten.relu.default"``), a collection of those (any of them), or a predicate ``(attrs, ref) -> bool``.
Element = str | Collection[str] | Callable[[dict[str, Any], NodeRef], bool]


def _matcher(element: Element) -> Callable[[dict[str, Any], NodeRef], bool]:
    if callable(element):
        return lambda attrs, ref: bool(element(attrs, ref))
    names = {element} if isinstance(element, str) else set(element)

    def match(attrs: dict[str, Any], ref: NodeRef) -> bool:
        kind = attrs.get("type")
        return kind in names or (kind == "function" and attrs.get("implementation") in names)

    return match


class _Walker:
    """Consumers of a node's whole output, optionally followed into callees and out to callers."""

    def __init__(self, ir: IR, through_modules: bool, sole_consumer: bool) -> None:
        self.ir = ir
        self.through = through_modules
        self.sole = sole_consumer
        self.sites = call_sites(ir)

    def consumers(self, ref: NodeRef) -> list[NodeRef]:
        g = graph_of(self.ir, ref).graph
        outs = list(g.out_edges(ref.node, data=True))
        if self.sole and len(outs) != 1:
            return []
        found: list[NodeRef] = []
        for _, dst, data in outs:
            if data.get("src_index") is not None:
                continue  # the consumer reads one item of the output: not a chain
            nxt = NodeRef(ref.implementation, dst, ref.variant)
            if g.nodes[dst].get("type") == "output":
                if self.through and self._passes_output(g, dst, ref.node):
                    found += self._up(nxt)
                continue
            found.append(nxt)
            if self.through:
                found += self._down(nxt)
        return found

    @staticmethod
    def _passes_output(g: Any, output: str, node: str) -> bool:
        """The graph returns exactly ``node``'s value."""
        args = g.nodes[output].get("args")
        if args is None:
            return g.in_degree(output) == 1
        return args in ([Ref(node)], [[Ref(node)]], [(Ref(node),)]) and g.in_degree(output) == 1

    def _up(self, output: NodeRef) -> list[NodeRef]:
        sites = self.sites.get(output.implementation, [])
        if len(sites) != 1:
            return []
        site = sites[0]
        attrs = graph_of(self.ir, site).node(site.node)
        if attrs.get("variant", 0) != output.variant:
            return []
        return self.consumers(site)

    def _down(self, call: NodeRef) -> list[NodeRef]:
        attrs = graph_of(self.ir, call).node(call.node)
        target = callee(attrs)
        if target is None or self.sites.get(target) != [call]:
            return []
        variant = attrs.get("variant", 0)
        graphs = self.ir[target].graphs()
        if not 0 <= variant < len(graphs):
            return []
        inner = graphs[variant].graph
        inputs = [n for n, a in inner.nodes(data=True) if a.get("type") == "input"]
        if len(inputs) != 1 or graph_of(self.ir, call).graph.in_degree(call.node) != 1:
            return []
        return self.consumers(NodeRef(target, inputs[0], variant))


def find(ir: IR, pattern: Sequence[Element], *, through_modules: bool = False, where: Where = None,
         sole_consumer: bool = True) -> list[Match]:
    """Every chain of nodes matching ``pattern``, in IR order.

    Node ``i + 1`` of a match consumes the whole output of node ``i`` (and, with ``sole_consumer``, is
    its only consumer). With ``through_modules``, a chain continues out of a module whose graph
    returns the node's value (into the consumers of the module's only call) and into a module called
    once with one input (to the consumers of its input node), so ``find(ir, ["conv2d", "batchnorm2d"],
    through_modules=True)`` also finds a convolution ending one block and a batch norm starting the next.

    Args:
        ir: the IR to search (not changed).
        pattern: node types, function targets, sets of them or predicates ``(node attrs, NodeRef) -> bool``.
        through_modules: follow values across module boundaries.
        where: keep only matches whose nodes all call implementations selected by this glob or predicate
            over implementation keys (function nodes: the key of the graph holding them).
        sole_consumer: each matched node's output feeds the next matched node only.

    Returns:
        :class:`Match` es with their nodes and the implementation each node calls.

    Raises:
        PatternNotFoundError: ``pattern`` is empty.
    """
    from .core import PatternNotFoundError

    if not pattern:
        raise PatternNotFoundError("the pattern is empty", hint="give at least one node type")
    tests = [_matcher(element) for element in pattern]
    walker = _Walker(ir, through_modules, sole_consumer)
    found: list[Match] = []

    def extend(chain: list[NodeRef]) -> None:
        if len(chain) == len(tests):
            keys = tuple(callee(graph_of(ir, ref).node(ref.node)) for ref in chain)
            if all(matches_where(where, k if k is not None else ref.implementation) for k, ref in zip(keys, chain)):
                found.append(Match(tuple(chain), keys))
            return
        for nxt in walker.consumers(chain[-1]):
            attrs = graph_of(ir, nxt).node(nxt.node)
            if nxt not in chain and tests[len(chain)](attrs, nxt):
                extend([*chain, nxt])

    for key, variant, graph in all_graphs(ir):
        for name, attrs in graph.graph.nodes(data=True):
            ref = NodeRef(key, name, variant)
            if attrs.get("type") not in ("input", "output") and tests[0](attrs, ref):
                extend([ref])
    return found


__all__ = ["Element", "find"]

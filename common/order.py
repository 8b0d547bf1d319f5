"""The order a graph's nodes run in: its stored order wherever that order is topological."""

from __future__ import annotations

import networkx as nx

from .ir import Implementation


def execution_order(impl: Implementation) -> list[str]:
    """Nodes of ``impl``'s graph in a topological order that follows the stored order wherever possible.

    A node added after the graph was written (the train-mode factor of a dropout, computed from ``self.training``)
    is stored after the ``output``; it runs, and is printed, before the node that reads it.
    """
    order = list(impl.graph._node)  # ``graph.nodes`` without its view (one per graph: a large IR has many)
    position = {n: i for i, n in enumerate(order)}
    pred = impl.graph._pred  # the adjacency itself: networkx's views cost more than the check
    if all(position[u] < i for i, n in enumerate(order) for u in pred[n]):
        return order  # the stored order is topological: the sort would return it unchanged
    return list(nx.lexicographical_topological_sort(impl.graph, key=position.__getitem__))


__all__ = ["execution_order"]

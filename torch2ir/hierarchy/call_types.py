r"""What the call nodes of the written graphs say they call: the type of the implementation they call, and
``nn.Sequential`` modules whose graph only chains their children, rebuilt as real ``nn.Sequential``\ s."""

from __future__ import annotations

import itertools
from collections.abc import Collection

from torch import nn

from common.ir import IR, NODE_KINDS
from torch2ir.hierarchy.modules import ModuleTable


def real_sequentials(ir: IR, table: ModuleTable) -> None:
    """A called ``nn.Sequential`` whose graph just chains its children in order is rebuilt
    as a real ``nn.Sequential`` (indexable), its graph kept for reading."""
    for key, impl in ir.items():
        module = table.module_of_key[key]
        if type(module) is not nn.Sequential or impl.type != "module" or not len(module) or impl.variants:
            continue
        if any(attrs.get("variant") for _, attrs in impl.graph.nodes(data=True)):
            continue  # a real Sequential cannot tell a child which of its per-call graphs to run
        names = impl.nodes
        kinds = [impl.node(n)["type"] for n in names]
        if kinds[0] != "input" or kinds[-1] != "output" or kinds.count("input") != 1:
            continue
        calls = names[1:-1]
        targets = [impl.node(n).get("target") or n for n in calls]
        prefix = "" if key == "root" else key + "."
        # an nn.Identity child leaves no node (QAT's fused downsample: Sequential(ConvBn2d, Identity))
        children = [name for name, child in module._modules.items() if type(child) is not nn.Identity]
        expected = [table.key(prefix + child) for child in children]
        called = [impl.node(n).get("implementation") for n in calls]
        chain = all(len(impl.in_edges(n)) == 1 and impl.in_edges(n)[0][0] == prev
                    for prev, n in itertools.pairwise(names))
        if chain and called == expected and targets == children and (calls or len(impl.in_edges(names[-1])) == 1):
            impl.type = "sequential"


def sync_call_types(ir: IR, called: Collection[str] | None = None) -> None:
    """Call nodes carry the type of the implementation they call; with ``called`` (instances that replaced
    stood-in members), only the calls of those, outside them (an instance's graphs are its body's, whose calls
    carry their types; a stood-in ``nn.Sequential`` was traced as a plain module)."""
    if called is not None and not called:
        return
    for impl in ir.values():
        if called is not None and impl.name in called:
            continue
        for graph in impl.graphs():
            for _, attrs in graph.graph.nodes(data=True):
                target = attrs.get("implementation")
                if attrs["type"] not in NODE_KINDS and target in ir and (called is None or target in called):
                    attrs["type"] = ir[target].type

"""Lints of the names an IR gives to things of the rebuilt model, and of its module tree.

Part of :func:`common.validate.validate`; every field listed in :data:`NAME_FIELDS` is checked
here with the rule of :mod:`common.names` its use requires, so no string of a file reaches
generated source or shadows an attribute of a rebuilt module:

- implementation keys, aliases, state names, state ties, ``get_attr`` targets and call
  nodes' ``target`` paths are attribute paths;
- keyword-argument names of calls (``kwargs`` keys and keyword slots of edges) are identifiers;
- the calling convention (``in_spec``, ``out_spec``, ``forward_arg_names`` in ``meta``) is read
  without importing anything and its names are identifiers.

It also checks that the module tree the aliases describe is a tree: a module registered, under
an alias, inside itself (or inside one of its own descendants) would make every walk of the
rebuilt model recurse forever.
"""

from __future__ import annotations

import functools
from typing import Any

import networkx as nx

from .errors import CycleError, IRError, IRFormatError, UnsafeNameError
from .ir import IR, Implementation, slot_path
from .names import check_attr_path, check_forward_arg_names, check_identifier
from .parameters import parse_parameters
from .treespec import is_viewing, kwarg_names, load_spec
from .values import Subgraph, collect_refs

#: Every string field of an implementation that names something in the rebuilt model, with its rule.
NAME_FIELDS = {
    "implementation key": "attribute path",
    "aliases[]": "attribute path",
    "state name": "attribute path",
    "state[].tie": "attribute path",
    "get_attr node implementation": "attribute path",
    "call node target": "attribute path",
    "node kwargs key": "identifier",
    "edge slot keyword": "identifier",
    "meta.forward_arg_names[]": "identifier (not a name generated code uses)",
    "meta.in_spec": "pytree spec, keyword names identifiers",
    "meta.out_spec": "pytree spec",
    "meta.parameters[][0]": "identifier (not a name generated code uses)",
}


def check_names(ir: IR, *, subgraphs: bool = True) -> None:
    """Raise :class:`~common.errors.UnsafeNameError` for the first name of ``ir`` that breaks its rule,
    :class:`~common.errors.CycleError` when aliases put a module inside itself.

    ``subgraphs=False`` leaves out the bodies of higher-order ops (:class:`~common.values.Subgraph` arguments):
    for a caller that walks every argument itself and calls :func:`check_graph_names` on each body it finds
    (:func:`common.validate.validate` does, sparing a second walk of every argument).
    """
    for key, impl in ir.items():
        if key != "root":
            check_attr_path(key, "implementation key", implementation=key)
        for name, rec in impl.state.items():
            check_attr_path(name, "state name", implementation=key)
            if rec.get("tie") is not None:
                check_attr_path(rec["tie"], f"state[{name!r}].tie", implementation=key)
        for alias in impl.aliases:
            check_attr_path(alias, "alias", implementation=key)
        if impl.body is None:  # an instance's graphs are its shared body's, checked once by the caller
            for graph in impl.graphs():
                check_graph_names(graph, key, subgraphs=subgraphs)
        if any(k in impl.meta for k in ("in_spec", "out_spec", "forward_arg_names", "parameters")):
            _check_convention(impl.meta, key)
    _check_tree(ir)


def check_graph_names(impl: Implementation, key: str, *, subgraphs: bool = True) -> None:
    """The names of one graph (``impl``'s) of implementation ``key``: targets, keyword names, keyword slots; with
    ``subgraphs``, those of the higher-order ops' bodies among its arguments too.

    Raises:
        UnsafeNameError: a name breaks its rule.
    """
    for node, attrs in impl.graph._node.items():  # ``nodes(data=True)`` without the view
        kind = attrs.get("type")
        if kind == "get_attr":
            check_attr_path(attrs.get("implementation"), "get_attr target", implementation=key, node=node)
        elif kind not in ("input", "output", "function") and attrs.get("target") is not None:
            check_attr_path(attrs["target"], "call target", implementation=key, node=node)
        kwargs = attrs.get("kwargs", {})
        if isinstance(kwargs, dict) and kind != "output":
            for name in kwargs:
                check_identifier(name, "keyword argument", implementation=key, node=node)
        if "args" not in attrs:  # with args, slots are paths into them (checked against the Refs there)
            for src, _, data in impl.in_edges(node):
                slot = data.get("slot")
                if slot is not None and isinstance(slot_path(slot)[0], str):
                    check_identifier(slot_path(slot)[0], f"keyword slot of the edge from {src!r}",
                                     implementation=key, node=node)
        if subgraphs:
            bodies: list[Subgraph] = []
            collect_refs([attrs.get("args", []), kwargs], (), [], bodies)
            for sub in bodies:
                check_graph_names(sub.impl, key)


def _readable_spec(text: str, field: str) -> bool:
    """True when ``text`` reads as a pytree spec (with identifier keyword names for an ``in_spec``); the
    repeated layers of a model share their spec texts, so each is read once (per reading mode: a placeholder
    read while viewing is no proof for a rebuild). Failures are not cached."""
    return _readable_in_mode(text, field, is_viewing())


@functools.lru_cache(maxsize=4096)
def _readable_in_mode(text: str, field: str, viewing: bool) -> bool:
    spec = load_spec(text, field)
    if field == "meta.in_spec":
        kwarg_names(spec, field)
    return True


def _check_convention(meta: dict[str, Any], key: str) -> None:
    if not isinstance(meta.get("in_spec"), str):
        raise IRFormatError("a calling convention needs 'in_spec' (a pytree spec string)", implementation=key,
                            key="meta.in_spec", hint="keep in_spec, out_spec and forward_arg_names together")
    for field in ("in_spec", "out_spec"):
        text = meta.get(field)
        if text is None:
            continue
        try:
            _readable_spec(text, f"meta.{field}")
        except (IRError, TypeError):  # again, for the error naming this implementation
            spec = load_spec(text, f"meta.{field}", implementation=key)
            if field == "in_spec":
                kwarg_names(spec, "meta.in_spec", implementation=key)
    names = check_forward_arg_names(meta.get("forward_arg_names", []), implementation=key,
                                    field="meta.forward_arg_names")
    if "parameters" in meta:
        parse_parameters(meta["parameters"], names, implementation=key)


def _check_tree(ir: IR) -> None:
    """The modules placed at every key and alias form a tree (plus shared children), never a cycle."""
    owner: dict[str, str] = {}
    for key, impl in ir.items():
        for path in (key, *impl.aliases):
            if path in owner:
                raise UnsafeNameError(f"module path {path!r} is used by both {owner[path]!r} and {key!r}",
                                      implementation=key, key="aliases",
                                      hint="each path names one module; drop the duplicate alias")
            owner[path] = key
    if ir.get("root") is not None and ir["root"].aliases:
        raise CycleError("the root module cannot have aliases (it would contain itself)", implementation="root",
                         hint="remove 'aliases' from the root implementation")
    edges: list[tuple[str, str]] = []
    for path, key in owner.items():
        if path == "root":
            continue
        parent_path = path.rpartition(".")[0]
        parent = _resolve(parent_path, owner)
        edges.append((parent, key))
        while parent.startswith("container:"):  # plain containers made for missing levels hang under theirs
            up = parent[len("container:"):].rpartition(".")[0]
            grand = _resolve(up, owner)
            edges.append((grand, parent))
            parent = grand
    successors: dict[str, dict[str, None]] = {}
    for parent, child in edges:
        successors.setdefault(parent, {})[child] = None
    if not acyclic(successors):
        tree = nx.DiGraph(edges)  # the error names the cycle networkx finds first, as it always did
        cycle = [u for u, _ in nx.find_cycle(tree)]
        raise CycleError(f"aliases put a module inside itself: {' -> '.join(cycle + cycle[:1])}",
                         implementation=next((c for c in cycle if not c.startswith("container:")), cycle[0]),
                         hint="an alias may not name a path below the module itself")


def acyclic(successors: dict[str, Any]) -> bool:
    """Whether the directed graph ``{node: its successors}`` has no cycle (Kahn's algorithm on plain dicts: the
    relations checked here have one node per implementation, and a networkx graph of them cost more than the
    check). A successor need not be a key."""
    indegree: dict[str, int] = dict.fromkeys(successors, 0)
    for targets in successors.values():
        for target in targets:
            indegree[target] = indegree.get(target, 0) + 1
    ready = [n for n, d in indegree.items() if d == 0]
    seen = 0
    while ready:
        node = ready.pop()
        seen += 1
        for target in successors.get(node, ()):
            indegree[target] -= 1
            if indegree[target] == 0:
                ready.append(target)
    return seen == len(indegree)


def _resolve(path: str, owner: dict[str, str]) -> str:
    if not path:
        return "root"
    return owner.get(path, f"container:{path}")


__all__ = ["NAME_FIELDS", "acyclic", "check_graph_names", "check_names"]

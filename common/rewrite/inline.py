"""Inline a module call: the callee's graph takes the call node's place in its caller's graph.

A module rebuilt from its graph (type ``module``) is called by a node of its parent; :func:`inline` puts the
nodes of the graph that call runs (the callee's main graph, or the per-call graph the node names with
``variant``) into the parent's graph instead, in the call's place:

- each input node of the callee becomes the value the call passes for it (a value of the parent, or a
  constant): the call's arguments are flattened by the callee's ``in_spec`` (a module with its call signature)
  or taken in order (data-flow arguments);
- each other node is copied under the name ``<call node>_<node>`` (numbered when taken); a state read
  (``get_attr``) or a call of a module below the callee gets the attribute path through the callee
  (``target`` ``<call target>.<path>``), so it reads the same tensor and calls the same module;
- every reader of the call's result reads what the callee's output node returns (item ``i`` of it for a
  reader of item ``i``).

The callee stays in the IR with its state (the parent reads its tensors through it). Once no node calls it any
more, it keeps no graph: it is a module nothing calls, as torch2ir writes one, so converting the rebuilt model
again gives the same IR. Handled leaves (typed implementations, ``nn.Linear``) have no graph and are refused.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from common.calls import argument_leaves
from common.ir import IR, Implementation
from common.names import without_counter
from common.treespec import load_spec
from common.values import Ref

from .core import (
    Match,
    NodeRef,
    RewriteError,
    call_sites,
    callee,
    edges_of,
    fresh_name,
    graph_of,
    map_refs,
    ordered,
    rebuild_graph,
)
from .ops import in_order
from .session import Session

#: ``meta`` keys of a module's call signature, dropped once nothing calls it.
_CALL_META = ("in_spec", "out_spec", "forward_arg_names", "parameters")


def inline(ir: IR, state: Mapping[str, torch.Tensor] | None, target: NodeRef | Match, *,
           allow: Iterable[str] | None = None) -> tuple[IR, dict[str, torch.Tensor] | None]:
    """Replace the module call ``target`` by the nodes of the graph it runs (see the module docstring).

    The state is unchanged (returned as a new dict when given), so ``ir2torch.convert(new_ir, new_state)``
    loads it with ``strict=True`` and computes what the original did.

    Raises:
        RewriteError: ``target`` is not one call of a module rebuilt from its graph, or the call's arguments
            or readers do not fit the callee's graph; or the result does not validate.
        PatternNotFoundError: the node is not in the IR.
    """
    ref = target.nodes[0] if isinstance(target, Match) and len(target.nodes) == 1 else target
    if not isinstance(ref, NodeRef):
        raise RewriteError("inline takes one call node", hint="pass a NodeRef, or a Match of one node")
    s = Session(ir, state, allow=allow, pass_name="inline")
    inline_call(s, ref)
    return s.finish()


def _fail(ref: NodeRef, message: str, hint: str) -> RewriteError:
    return RewriteError(message, implementation=ref.implementation, node=ref.node, hint=hint)


def inline_call(s: Session, ref: NodeRef) -> set[str]:
    """:func:`inline` on a session; returns the names the callee's nodes have in the caller's graph."""
    parent = graph_of(s.ir, ref)
    if s.ir[ref.implementation].type != "module":  # a real nn.Sequential runs its children, not a graph
        raise _fail(ref, f"the caller {ref.implementation!r} is rebuilt as its class "
                    f"({s.ir[ref.implementation].type}), not from its graph", "inline calls inside modules rebuilt "
                    "from their graphs (type 'module'); inline the container's own call into its caller instead")
    attrs = parent.node(ref.node)
    key = callee(attrs)
    if key is None or key not in s.ir:
        raise _fail(ref, f"node {ref.node!r} is a {attrs['type']!r} node, not a module call",
                    "inline the call node of a module")
    child = s.ir[key]
    variant = attrs.get("variant", 0)
    graphs = child.graphs()
    if child.type not in ("module", "sequential") or not child.node_count or not 0 <= variant < len(graphs):
        raise _fail(ref, f"{key!r} ({child.type}) has no graph to inline" + (": a handled leaf is one call" if
                    child.type not in ("module", "sequential") else ""),
                    "inline calls of modules rebuilt from their graphs (type 'module') or of an nn.Sequential")
    body = graphs[variant]
    path = attrs.get("target") or (key if ref.implementation == "root" else key[len(ref.implementation) + 1:])
    values = _arguments(ref, attrs, child, body)
    taken = set(parent.nodes)
    renamed: dict[str, str] = {}
    copied: list[tuple[str, dict[str, Any]]] = []
    for name in body.nodes:
        node = copy.deepcopy(body.node(name))  # the callee may keep its graph: no value is shared with it
        if node["type"] in ("input", "output"):
            continue
        renamed[name] = new = _taken_name(taken, f"{ref.node}_{name}")
        copied.append((new, node))

    def inner(r: Ref) -> Any:
        if r.node in values:
            value = values[r.node]
            if r.index is None:
                return value
            if isinstance(value, Ref) and value.index is None:
                return Ref(value.node, r.index)
            raise _fail(ref, f"the callee reads item {r.index} of its input {r.node!r}, which the call gives as "
                        f"{value!r}", "inline a call whose arguments are plain values")
        return Ref(renamed[r.node], r.index)

    result = map_refs(_result(ref, child, body), inner)
    nodes: list[tuple[str, dict[str, Any]]] = []
    for name, node in ((n, a) for n, a in parent.graph.nodes(data=True)):
        if name != ref.node:
            nodes.append((name, _read_result(dict(node), ref, result)))
            continue
        for new, item in copied:
            for field in ("args", "kwargs"):
                if field in item:
                    item[field] = map_refs(item[field], inner)
            if item["type"] == "get_attr":
                item["implementation"] = f"{path}.{item['implementation']}"
            elif callee(item) is not None:
                inner_path = item.get("target") or item["implementation"][len(key) + 1:]
                through = f"{path}.{inner_path}"
                owner = ref.implementation
                plain = item["implementation"] if owner == "root" else item["implementation"][len(owner) + 1:]
                if through == plain and (owner == "root" or item["implementation"].startswith(f"{owner}.")):
                    item.pop("target", None)  # the key's own path from the caller: as torch2ir writes it
                else:
                    item["target"] = through
            nodes.append((new, item))
    parent_edges = [(u, v, d) for u, v, _, d in parent._ordered_edges() if u != ref.node and v != ref.node]
    changed = {n for n, a in nodes if n in renamed.values() or _reads(parent, n, ref.node)}
    edges = [e for e in parent_edges if e[1] not in changed]
    for name, node in nodes:
        if name in changed:
            edges += edges_of(name, node)
    rebuild_graph(parent, nodes, in_order(edges, nodes))
    same = _one_read_per_tensor(parent)
    names = _name_by_structure(parent, ref.implementation, {renamed[n]: n for n in renamed})
    _drop_unused_graphs(s.ir, key)
    s.changes.append(f"{ref}: inlined {key!r} ({len(copied)} nodes)")
    return {names.get(same.get(n, n), same.get(n, n)) for n in renamed.values()}


def _drop_unused_graphs(ir: IR, key: str) -> None:
    """Keep of ``key``'s graphs those a call still runs, as a conversion writes them: the first one still called
    is the main graph, the others its variants (call nodes renumbered). Once nothing calls it, it is a module with
    its state and no graph (and no call signature)."""
    child = ir[key]
    sites = call_sites(ir).get(key, [])
    calls = [graph_of(ir, site).node(site.node) for site in sites]
    used = sorted({attrs.get("variant", 0) for attrs in calls})
    if used == list(range(1 + child.variant_count)):
        return
    if not used:
        child.graph.clear()
        child.variants = []
        for name in _CALL_META:
            child.meta.pop(name, None)
        return
    graphs = child.graphs()
    kept = [graphs[i] for i in used]
    main = kept[0].graph
    child.variants = kept[1:]
    child.graph = main
    number = {old: new for new, old in enumerate(used)}
    for attrs in calls:
        new = number[attrs.pop("variant", 0)]
        if new:
            attrs["variant"] = new


def _one_read_per_tensor(graph: Implementation) -> dict[str, str]:
    """One ``get_attr`` node per state path, as a conversion writes a graph: a later read of the same tensor (the
    caller's and the callee's read of one parameter) is dropped and its readers read the first. Returns
    ``{dropped node: the node read instead}``."""
    first: dict[str, str] = {}
    same: dict[str, str] = {}
    for name in graph.nodes:
        attrs = graph.node(name)
        if attrs["type"] == "get_attr":
            kept = first.setdefault(attrs["implementation"], name)
            if kept != name:
                same[name] = kept
    if not same:
        return same
    nodes, edges = ordered(graph)
    moved = [(n, {**a, **{f: map_refs(a[f], lambda r: Ref(same.get(r.node, r.node), r.index))
                          for f in ("args", "kwargs") if f in a}}) for n, a in nodes if n not in same]
    rebuild_graph(graph, moved, [(same.get(u, u), v, d) for u, v, d in edges if v not in same])
    return same


def _name_by_structure(graph: Implementation, owner: str, copied: Mapping[str, str]) -> dict[str, str]:
    """Name the nodes of ``graph`` as torch2ir names those of a graph it writes: an op by what it computes,
    numbered in graph order (``mul``, ``mul_1``), a call or a state read by its attribute path (``block_lin``),
    a further call of one module with ``@n``; inputs and the output keep theirs (``copied``: the callee's name of
    each copied node). Converting the rebuilt model then names them alike. Returns ``{old name: new name}``."""
    taken = {n for n in graph.nodes if graph.node(n)["type"] in ("input", "output")} | {"output"}
    rename: dict[str, str] = {}
    calls: dict[str, int] = {}
    for name in graph.nodes:
        attrs = graph.node(name)
        kind = attrs["type"]
        if kind in ("input", "output"):
            continue
        if kind == "function":
            base = without_counter(copied.get(name, name))
        elif kind == "get_attr":
            base = attrs["implementation"]
        else:
            key = attrs["implementation"]
            path = attrs.get("target") or (key if owner == "root" else key[len(owner) + 1:])
            seen = calls.get(path, 0)
            calls[path] = seen + 1
            base = path if not seen else f"{path}@{seen}"
        rename[name] = _taken_name(taken, base.replace(".", "_") or "node")
    if all(old == new for old, new in rename.items()):
        return rename
    nodes, edges = ordered(graph)
    moved = [(rename.get(n, n), {**a, **{f: map_refs(a[f], lambda r: Ref(rename.get(r.node, r.node), r.index))
                                         for f in ("args", "kwargs") if f in a}}) for n, a in nodes]
    rebuild_graph(graph, moved, [(rename.get(u, u), rename.get(v, v), d) for u, v, d in edges])
    return rename


def _taken_name(taken: set[str], base: str) -> str:
    """:func:`~common.rewrite.core.fresh_name`, recorded in ``taken``."""
    name = fresh_name(taken, base)
    taken.add(name)
    return name


def _arguments(ref: NodeRef, attrs: dict[str, Any], child: Implementation, body: Implementation) -> dict[str, Any]:
    """``{callee input node: the value the call passes for it}``."""
    inputs = [n for n in body.nodes if body.node(n)["type"] == "input"]
    args, kwargs = list(attrs.get("args", [])), dict(attrs.get("kwargs", {}))
    if "args" not in attrs:
        raise _fail(ref, "the call has no 'args' template (its arguments are edges only)",
                    "inline calls written by torch2ir")
    spec = child.meta.get("in_spec")
    leaves = argument_leaves(args, kwargs, isinstance(spec, str))
    if isinstance(spec, str):
        expected = load_spec(spec, implementation=child.name)
        if expected.num_leaves != len(leaves):
            raise _fail(ref, f"the call passes {len(leaves)} values where {child.name!r}'s signature takes "
                        f"{expected.num_leaves}", "inline a call whose arguments follow the callee's signature")
    if len(leaves) != len(inputs):
        raise _fail(ref, f"the call passes {len(leaves)} values to a graph of {len(inputs)} inputs",
                    "inline a call whose arguments are the callee graph's inputs")
    return dict(zip(inputs, leaves))


def _result(ref: NodeRef, child: Implementation, body: Implementation) -> Any:
    """What the call returns: the callee's output node's value, or, for a module with its call signature, its
    flat outputs put back in the structure of its ``out_spec`` (tuples and lists; a tensor)."""
    outputs = [n for n in body.nodes if body.node(n)["type"] == "output"]
    node = body.node(outputs[0]) if len(outputs) == 1 else {}
    if "args" not in node or len(node["args"]) != 1:
        raise _fail(ref, "the callee's output node has no one-value 'args' template",
                    "inline calls of graphs written by torch2ir")
    value = node["args"][0]
    spec = child.meta.get("out_spec")
    if not isinstance(spec, str):
        return value
    leaves = iter(value if isinstance(value, list) else [value])

    def build(node_spec: Any) -> Any:
        if node_spec.is_leaf():
            return next(leaves)
        if node_spec.type not in (tuple, list):
            raise _fail(ref, f"{child.name!r} returns a {node_spec.type.__name__}",
                        "inline calls of modules that return tensors, tuples or lists of them")
        items = [build(c) for c in node_spec.children()]
        return tuple(items) if node_spec.type is tuple else items

    return build(load_spec(spec, "out_spec", implementation=child.name))


def _read_result(node: dict[str, Any], ref: NodeRef, result: Any) -> dict[str, Any]:
    """``node`` reading, wherever it read the call's result (or item ``i`` of it), that value."""
    def swap(r: Ref) -> Any:
        if r.node != ref.node:
            return r
        if r.index is None:
            return result
        if isinstance(result, (list, tuple)) and 0 <= r.index < len(result):
            return result[r.index]
        if isinstance(result, Ref) and result.index is None:
            return Ref(result.node, r.index)
        raise _fail(ref, f"a reader takes item {r.index} of the call's result {result!r}",
                    "inline a call whose readers take its items as the callee returns them")

    for field in ("args", "kwargs"):
        if field in node:
            node[field] = map_refs(node[field], swap)
    return node


def _reads(graph: Implementation, name: str, call: str) -> bool:
    return any(u == call for u, _, _ in graph.in_edges(name)) if name in graph.graph else False


__all__ = ["inline"]

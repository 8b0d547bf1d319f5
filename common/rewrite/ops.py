"""The edits behind the primitives, on a :class:`~common.rewrite.session.Session` (no copy, no validation)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from common.ir import IR
from common.provenance import PROVENANCE_KEY
from common.values import Ref, iter_refs

from .core import (
    Match,
    NodeRef,
    RewriteError,
    call_sites,
    callee,
    compose_index,
    fresh_name,
    graph_of,
    map_refs,
    ordered,
    rebuild_graph,
    topo_order,
)
from .session import Session
from .state import StateTransform

Split = tuple[int, Sequence[int]]


def _carried_meta(old: Any, type: str, meta: Mapping[str, Any] | None, key: str) -> dict[str, Any]:
    """``meta`` if given; else the single replaced implementation's (``class`` dropped when the type changes)."""
    if meta is not None:
        return dict(meta)
    if old is None:
        return {"source": key}
    out = {k: v for k, v in old.meta.items() if k != PROVENANCE_KEY}
    if old.type != type:
        out.pop("class", None)
    return out


def replace_key(s: Session, key: str, *, type: str, data: Mapping[str, Any] | None, state_fn: StateTransform | None,
                meta: Mapping[str, Any] | None, record: bool, pass_name: str | None) -> None:
    """Replace implementation ``key`` by a leaf of ``type``; every call of it follows."""
    if key not in s.ir or key == "root":
        raise RewriteError("no such implementation (or the root, which cannot be replaced)", implementation=key,
                           hint="see list(ir) for the keys")
    old = s.ir[key]
    sites = call_sites(s.ir).get(key, [])
    inner = [k for k in s.ir if k.startswith(key + ".")]
    gone = s.removable(inner, {r for k in inner for r in call_sites(s.ir).get(k, [])}) if inner else []
    prov = s.provenance([key], record, pass_name)
    like = old.state if state_fn is not None else {}
    impl = s.new_implementation(key, type, old.data if data is None else data, _carried_meta(old, type, meta, key),
                                state_fn, like, prov)
    if state_fn is None:
        impl.state = {n: dict(r) for n, r in old.state.items()}
    impl.aliases = list(old.aliases)
    s.place(impl, [key, *gone], key, _parent(s.ir, key))
    for ref in sites:
        attrs = graph_of(s.ir, ref).node(ref.node)
        attrs["type"] = type
        attrs.pop("variant", None)
    s.changes.append(f"{key}: {old.type} -> {type}")


def _parent(ir: IR, key: str) -> str:
    from common.ir import parent_key

    return parent_key(key, ir)


def _joined_meta(metas: list[Any], dim: int, sizes: Sequence[int]) -> dict[str, Any] | None:
    """The shape and dtype of the output the pieces ``metas`` are slices of along ``dim`` (``None``: unknown)."""
    shapes = [m.get("shape") if isinstance(m, dict) else None for m in metas]
    dtypes = {m.get("dtype") if isinstance(m, dict) else None for m in metas}
    if not shapes or not all(isinstance(x, list) and x for x in shapes) or len(dtypes) != 1 or None in dtypes:
        return None
    shape = list(shapes[0])
    axis = dim % len(shape)
    if any(len(x) != len(shape) or [d for i, d in enumerate(x) if i != axis] != [d for i, d in enumerate(shape)
                                                                                   if i != axis] for x in shapes):
        return None
    shape[axis] = sum(sizes)
    return {"shape": shape, "dtype": next(iter(dtypes))}


def replace_nodes(s: Session, match: Match, *, type: str, key: str | None, data: Mapping[str, Any] | None,
                  state_fn: StateTransform | None, meta: Mapping[str, Any] | None, split: Split | None,
                  record: bool, pass_name: str | None, node_name: str | None = None) -> str:
    """Replace the matched nodes (one graph) by one call of a new implementation; returns its key. The call is
    named ``node_name`` (made unique) when given, else after the first matched node."""
    if match.graph is None:
        raise RewriteError(f"the match spans module boundaries ({', '.join(map(str, match.nodes))}); one call "
                           "cannot replace nodes of several graphs", implementation=match.nodes[0].implementation,
                           node=match.nodes[0].node, hint="find with through_modules=False, or rewrite each graph")
    owner, variant = match.graph
    graph = graph_of(s.ir, match.nodes[0])
    names = [ref.node for ref in match.nodes]
    for name in names:
        if graph.node(name)["type"] in ("input", "output"):
            raise RewriteError("input and output nodes cannot be replaced", implementation=owner, node=name)
    if len(set(names)) != len(names):
        raise RewriteError("the match names a node twice", implementation=owner, node=names[0])
    nodes, edges = ordered(graph)
    inside = set(names)
    from_types = [graph.node(n)["type"] if graph.node(n)["type"] != "function" else graph.node(n)["implementation"]
                  for n in names]
    replaced = list(dict.fromkeys(k for k in (callee(graph.node(n)) for n in names) if k is not None))
    key = key or (replaced[0] if replaced else None)
    if key is None:
        raise RewriteError("the match calls no implementation, so the new one needs a key", implementation=owner,
                           node=names[0], hint=f"pass key='{owner}.<name>'")
    calls = set(match.nodes) | {NodeRef(owner, n, variant) for n in names}
    gone = s.removable(replaced, calls)
    single = s.ir[replaced[0]] if len(replaced) == 1 and len(names) == 1 else None
    outside = [(u, v, d) for u, v, d in edges if u in inside and v not in inside]
    producers = list(dict.fromkeys(u for u, _, _ in outside))
    if split is None and len(producers) > 1:
        raise RewriteError(f"{len(producers)} matched nodes ({', '.join(producers)}) are used outside the match; "
                           "one call has one output", implementation=owner, node=producers[1],
                           hint="pass split=(dim, sizes) to slice the new output per matched node, or match less")
    if split is not None and len(split[1]) != len(names):
        raise RewriteError(f"split has {len(split[1])} sizes for {len(names)} matched nodes", implementation=owner,
                           node=names[0], hint="give one size per matched node, in match order")
    like = {n: r for k in reversed(replaced) for n, r in s.ir[k].state.items()}  # the first one wins
    prov = s.provenance(replaced, record, pass_name)
    impl = s.new_implementation(key, type, (single.data if single else {}) if data is None else data,
                                _carried_meta(single, type, meta, key), state_fn, like, prov)
    if state_fn is None and single is not None:
        impl.state = {n: dict(r) for n, r in single.state.items()}
        prefix = "" if single.name == "root" else single.name + "."
        for n in single.state:
            if key != single.name and s.state is not None and prefix + n in s.view():
                s.made[("" if key == "root" else key + ".") + n] = s.view()[prefix + n]
    rank = {n: float(i) for i, (n, _) in enumerate(nodes)}
    taken = [n for n, _ in nodes if n not in inside]
    first = (fresh_name(taken, node_name) if node_name else names[0]) if split is None else \
        fresh_name(taken, key.rpartition(".")[2])
    rank[first] = min(rank[n] for n in names)
    attrs: dict[str, Any] = {"type": type, "implementation": key}
    new_edges = [(u, v, d) for u, v, d in edges if u not in inside and v not in inside]
    if len(names) == 1:
        old = graph.node(names[0])
        attrs.update({k: v for k, v in old.items() if k not in ("type", "implementation", "variant", "target")})
        new_edges += [(u, first, d) for u, v, d in edges if v == names[0]]
    else:
        sources = list(dict.fromkeys((u, d.get("src_index")) for u, v, d in edges if v in inside and u not in inside))
        attrs["args"] = [Ref(u, i) for u, i in sources]
        attrs["kwargs"] = {}
        new_edges += [(u, first, {"slot": pos, **({"src_index": i} if i is not None else {})})
                      for pos, (u, i) in enumerate(sources)]
        if split is None and producers and "meta" in graph.node(producers[0]):
            attrs["meta"] = graph.node(producers[0])["meta"]
        elif split is not None:
            joined = _joined_meta([graph.node(n).get("meta") for n in names], *split)
            if joined is not None:
                attrs["meta"] = joined
    new_nodes = [(n, a) for n, a in nodes if n not in inside] + [(first, attrs)]
    rename: dict[str, str] = {}
    if split is None:
        rename = dict.fromkeys(producers, first)
    else:
        dim, sizes = split
        start = 0
        for name, size in zip(names, sizes):
            if name in producers:
                piece = {"type": "function", "implementation": "aten.slice.Tensor",
                         "args": [Ref(first), dim, start, start + size], "kwargs": {}}
                if "meta" in graph.node(name):
                    piece["meta"] = graph.node(name)["meta"]
                new_nodes.append((name, piece))
                new_edges.append((first, name, {"slot": 0}))
                rank[name] = rank[first] + 0.5
            start += size
    for u, v, d in outside:
        new_edges.append((rename.get(u, u), v, d))
    new_nodes = [(n, _renamed_refs(a, rename) if n not in inside or split is not None else a) for n, a in new_nodes]
    rebuild_graph(graph, topo_order(new_nodes, new_edges, rank, owner), in_order(new_edges, new_nodes))
    s.place(impl, gone, replaced[0] if replaced else None, owner)
    s.changes.append(f"{key}: {' + '.join(from_types)} -> {type}")
    return key


def _renamed_refs(attrs: dict[str, Any], rename: Mapping[str, str]) -> dict[str, Any]:
    if not rename:
        return attrs
    out = dict(attrs)
    for field in ("args", "kwargs"):
        if field in out:
            out[field] = map_refs(out[field], lambda r: Ref(rename.get(r.node, r.node), r.index))
    return out


def in_order(edges: list[tuple[str, str, dict[str, Any]]], nodes: list[tuple[str, dict[str, Any]]]) -> (
        list[tuple[str, str, dict[str, Any]]]):
    """Edges grouped by destination in node order, keeping each destination's edge order."""
    by_dst: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for edge in edges:
        by_dst.setdefault(edge[1], []).append(edge)
    return [e for n, _ in nodes for e in by_dst.get(n, [])]


def _argument_edges(graph: Any, node: str) -> list[tuple[str, dict[str, Any]]]:
    """``(source, edge attrs)`` of a node's inputs in argument order."""
    edges = [(u, d) for u, _, d in graph.in_edges(node)]
    attrs = graph.node(node)
    if "args" in attrs or "kwargs" in attrs:
        order = [p for p, _ in iter_refs(list(attrs.get("args", [])))] + \
            [p for p, _ in iter_refs(attrs.get("kwargs", {}))]
        from common.ir import slot_path

        return sorted(edges, key=lambda e: order.index(slot_path(e[1]["slot"])) if e[1].get("slot") is not None
                      and slot_path(e[1]["slot"]) in order else len(order))
    slotted = sorted((e for e in edges if isinstance(e[1].get("slot"), int)), key=lambda e: e[1]["slot"])
    return slotted + [e for e in edges if e[1].get("slot") is None]


def remove_node(s: Session, ref: NodeRef, input: int) -> None:
    """Remove a node, its consumers reading its ``input``-th argument instead; drop its callee if unused."""
    graph = graph_of(s.ir, ref)
    attrs = graph.node(ref.node)
    if attrs["type"] in ("input", "output"):
        raise RewriteError("input and output nodes cannot be removed", implementation=ref.implementation,
                           node=ref.node)
    inputs = _argument_edges(graph, ref.node)
    if not 0 <= input < len(inputs):
        raise RewriteError(f"the node has {len(inputs)} inputs, so input {input} cannot take its place",
                           implementation=ref.implementation, node=ref.node,
                           hint="a removed node's consumers read one of its inputs instead")
    src, src_data = inputs[input]
    inner = src_data.get("src_index")
    target = callee(attrs)
    gone: list[str] = []
    if target is not None:
        sites = call_sites(s.ir).get(target, [])
        if sites == [ref]:
            gone = s.removable([target], {ref})
    nodes, edges = ordered(graph)
    kept_edges = []
    renamed: dict[str, dict[str, Any]] = {}
    for u, v, d in edges:
        if v == ref.node:
            continue
        if u == ref.node:
            index = compose_index(d.get("src_index"), inner, ref)
            d = {k: x for k, x in d.items() if k != "src_index"} | ({"src_index": index} if index is not None else {})
            u = src
            renamed[v] = graph.node(v)
        kept_edges.append((u, v, d))
    new_nodes = []
    for n, a in nodes:
        if n == ref.node:
            continue
        if n in renamed:
            a = dict(a)
            for field in ("args", "kwargs"):
                if field in a:
                    a[field] = map_refs(a[field], lambda r: Ref(src, compose_index(r.index, inner, ref))
                                        if r.node == ref.node else r)
        new_nodes.append((n, a))
    rebuild_graph(graph, new_nodes, in_order(kept_edges, new_nodes))
    if gone:
        keys = [k for k in s.ir if k not in gone]
        tensors = s.ir.tensors
        s.ir = IR([s.ir[k] for k in keys])
        s.ir.tensors = tensors
    s.changes.append(f"{ref}: removed ({attrs['type']})")


def _component(text: str) -> str:
    out = re.sub(r"[^A-Za-z0-9_]", "_", text).strip("_") or "node"
    return out if not out[0].isdigit() else "m" + out


def insert_node(s: Session, ref: NodeRef, *, type: str, key: str | None, data: Mapping[str, Any] | None,
                state_fn: StateTransform | None, meta: Mapping[str, Any] | None, node_name: str | None,
                record: bool, pass_name: str | None) -> str:
    """Insert a call of a new implementation right after a node; its consumers read the new call."""
    graph = graph_of(s.ir, ref)
    attrs = graph.node(ref.node)
    if attrs["type"] == "output":
        raise RewriteError("nothing can follow the output node", implementation=ref.implementation, node=ref.node,
                           hint="insert after the node feeding the output")
    owner = ref.implementation
    prefix = "" if owner == "root" else owner + "."
    if key is None:
        key = prefix + fresh_name({k[len(prefix):] for k in s.ir if k.startswith(prefix)},
                                  f"{_component(ref.node)}_{_component(type)}")
    nodes, edges = ordered(graph)
    name = node_name or fresh_name([n for n, _ in nodes], key[len(prefix):].replace(".", "_"))
    if name in graph.graph:
        raise RewriteError(f"node name {name!r} is taken", implementation=owner, node=name, hint="pass node_name=")
    prov = s.provenance([], record, pass_name) if record else []
    impl = s.new_implementation(key, type, data, dict(meta) if meta is not None else {"source": key}, state_fn,
                                {}, prov)
    new_attrs: dict[str, Any] = {"type": type, "implementation": key, "args": [Ref(ref.node)], "kwargs": {}}
    if "meta" in attrs:
        new_attrs["meta"] = attrs["meta"]
    new_edges = []
    touched: set[str] = set()
    for u, v, d in edges:
        if u == ref.node:
            u = name
            touched.add(v)
        new_edges.append((u, v, d))
    new_edges.append((ref.node, name, {"slot": 0}))
    new_nodes = []
    for n, a in nodes:
        if n in touched:
            a = _renamed_refs(a, {ref.node: name})
        new_nodes.append((n, a))
        if n == ref.node:
            new_nodes.append((name, new_attrs))
    rebuild_graph(graph, new_nodes, in_order(new_edges, new_nodes))
    s.place(impl, [], callee(attrs) or owner, owner, after=True)
    s.changes.append(f"{key}: {type} inserted after {ref}")
    return key


__all__ = ["insert_node", "remove_node", "replace_key", "replace_nodes"]

"""The schema of an implementation's plain dict: node kinds, reserved keys, and the
parsing of ``nodes`` / ``edges`` / ``state`` with a precise error for every bad field."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from .errors import DanglingEdgeError, IRFormatError

#: Node types that are not calls of another implementation.
NODE_KINDS = ("input", "output", "function", "get_attr")
#: Keys of an implementation's plain dict that are not attributes (``data``).
RESERVED_KEYS = ("name", "type", "nodes", "edges", "state", "aliases", "meta", "variants")
#: Kinds of state records.
STATE_KINDS = ("parameter", "buffer", "constant")

#: Default budget of nodes of one document: all graphs and variants of all its implementations together
#: (``max_nodes=`` of ``IR.load`` / ``IR.from_dict`` / ``FlatIR.load``). It bounds the work and memory of loading a
#: hostile file; an 80-layer Llama with Llama-3-70B dimensions has about 8 300 (and 1.06 edges per node).
DEFAULT_MAX_NODES = 2_000_000
#: Edges allowed per node of the budget (a document may have ``EDGES_PER_NODE * max_nodes`` edges in all).
EDGES_PER_NODE = 4
#: JSON objects allowed per node of the budget while a file is parsed (a node of a real IR is about 6: itself,
#: its ``meta``, dtypes, references), so that an oversized file is refused before it is all in memory.
JSON_OBJECTS_PER_NODE = 32
#: Former per-graph caps, kept for callers that read them: loading applies the budget above instead
#: (``MAX_GRAPH_NODES`` still bounds the variant number a FlatIR node's ``source`` names).
MAX_GRAPH_NODES = 1_000_000
MAX_GRAPH_EDGES = 4_000_000

Slot = int | str | tuple
ValueFn = Callable[[Any, str], Any]


def _same(value: Any, where: str) -> Any:
    return value


def slot_path(slot: Slot) -> tuple:
    """An edge slot as a path: ``0`` -> ``(0,)``, ``"dim"`` -> ``("dim",)``, paths unchanged."""
    return slot if isinstance(slot, tuple) else (slot,)



#: Fields of a node's plain dict that are not stored as its data.
_NODE_HEADER = frozenset({"name", "type", "implementation"})
#: Fields an edge's plain dict may have.
_EDGE_FIELDS = frozenset({"src", "dst", "slot", "src_index"})


def expect(value: Any, kind: type | tuple, where: str, impl: str | None = None) -> None:
    if not (type(value) is dict and kind is Mapping) and not isinstance(value, kind):  # (no ABC check for a dict)
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise IRFormatError(f"expected {names}, got {type(value).__name__}", implementation=impl, key=where)


def parse_nodes(impl: Any, raw: Any, value_fn: ValueFn, where: str) -> None:
    if isinstance(raw, Mapping):
        items = list(raw.items())
    elif isinstance(raw, list):
        items = [(n.get("name") if isinstance(n, Mapping) else None, n) for n in raw]
    else:
        raise IRFormatError(f"'nodes' must be a mapping or a list, got {type(raw).__name__}",
                            implementation=impl.name, key=f"{where}.nodes")
    for name, node in items:
        nwhere = f"{where}.nodes[{name!r}]"
        if not isinstance(name, str) or not name:
            raise IRFormatError(f"node name {name!r} is not a non-empty string", implementation=impl.name, key=nwhere)
        expect(node, Mapping, nwhere, impl.name)
        if node.get("name", name) != name:
            raise IRFormatError(f"node name {node['name']!r} differs from its key {name!r}",
                                implementation=impl.name, node=name)
        if name in impl.graph._node:
            raise IRFormatError("duplicate node name", implementation=impl.name, node=name)
        ntype = node.get("type")
        if not isinstance(ntype, str) or not ntype:
            raise IRFormatError("node has no 'type'", implementation=impl.name, node=name,
                                hint=f"use one of {', '.join(NODE_KINDS)} or the type of the implementation it calls")
        target = node.get("implementation")
        if target is not None and not isinstance(target, str):
            raise IRFormatError(f"'implementation' must be a string, got {type(target).__name__}",
                                implementation=impl.name, node=name)
        attrs: dict[str, Any] = {"type": ntype}
        if target is not None:
            attrs["implementation"] = target
        for k, v in node.items():
            if k not in _NODE_HEADER:
                attrs[k] = value_fn(v, f"{nwhere}.{k}")
        impl.graph.add_node(name)  # what ``impl.add_node(name, ntype, target, **fields)`` does, without the view
        impl.graph._node[name].update(attrs)


def parse_edges(impl: Any, raw: Any, value_fn: ValueFn, where: str) -> None:
    if isinstance(raw, Mapping):
        items = []
        for key, edge in raw.items():
            if not (isinstance(key, tuple) and len(key) in (2, 3)):
                raise IRFormatError(f"edge key {key!r} is not a (src, dst) tuple",
                                    implementation=impl.name, key=f"{where}.edges")
            expect(edge, Mapping, f"{where}.edges[{key!r}]", impl.name)
            for field, end in (("src", key[0]), ("dst", key[1])):
                if field in edge and edge[field] != end:
                    raise IRFormatError(f"edge {key!r} has {field}={edge[field]!r}",
                                        implementation=impl.name, key=f"{where}.edges",
                                        hint="an edge's src/dst must match its key")
            items.append((key[0], key[1], edge))
    elif isinstance(raw, list):
        items = []
        for i, edge in enumerate(raw):
            expect(edge, Mapping, f"{where}.edges[{i}]", impl.name)
            items.append((edge.get("src"), edge.get("dst"), edge))
    else:
        raise IRFormatError(f"'edges' must be a mapping or a list, got {type(raw).__name__}",
                            implementation=impl.name, key=f"{where}.edges")
    slotless: dict[str, int] = {}
    nodes = impl.graph._node
    ewhere = f"{where}.edges"
    for src, dst, edge in items:
        for end in (src, dst):
            if not isinstance(end, str):
                raise IRFormatError(f"edge end {end!r} is not a node name", implementation=impl.name,
                                    key=f"{where}.edges")
            if end not in nodes:
                raise DanglingEdgeError(f"edge {src!r} -> {dst!r} names missing node {end!r}",
                                        implementation=impl.name, node=end,
                                        hint="add the node to 'nodes' or remove the edge")
        if not edge.keys() <= _EDGE_FIELDS:
            extra = set(edge) - _EDGE_FIELDS
            raise IRFormatError(f"edge {src!r} -> {dst!r} has unknown fields {sorted(map(str, extra))}",
                                implementation=impl.name, hint="edges carry src, dst, slot and src_index only")
        slot = value_fn(edge.get("slot"), ewhere)
        if isinstance(slot, list):
            slot = tuple(slot)
        if slot is not None and not (type(slot) is int and slot >= 0) and not _valid_slot(slot):
            raise IRFormatError(f"edge {src!r} -> {dst!r} has invalid slot {slot!r}", implementation=impl.name,
                                hint="a slot is a positional index, a keyword name, or a path starting with one")
        src_index = edge.get("src_index")
        if src_index is not None and (isinstance(src_index, bool) or not isinstance(src_index, int)):
            raise IRFormatError(f"edge {src!r} -> {dst!r} has non-integer src_index {src_index!r}",
                                implementation=impl.name)
        if slot is None:
            slotless[dst] = slotless.get(dst, 0) + 1
        attrs: dict[str, Any] = {}  # ``impl.add_edge(src, dst, slot=slot, src_index=src_index)``: both ends exist
        if slot is not None:
            attrs["slot"] = slot
        if src_index is not None:
            attrs["src_index"] = src_index
        impl.graph.add_edge(src, dst, **attrs)
    fix_slotless_order(impl, items, slotless)


def fix_slotless_order(impl: Any, items: list, slotless: dict[str, int]) -> None:
    """Keep "slotless edges feed positional arguments in document order" true in the graph.

    A graph lists a node's in-edges grouped by source, so edges ``a, b, a`` into one node
    come back as ``a, a, b``. Where the document order differs from the graph's, the
    slotless edges of that node get explicit slots in document order.
    """
    for dst, count in slotless.items():
        if count < 2:
            continue
        doc_order = [src for src, d, e in items if d == dst and e.get("slot") is None]
        graph_order = [src for src, _, data in impl.in_edges(dst) if data.get("slot") is None]
        if doc_order == graph_order:
            continue
        taken = {data["slot"] for _, _, data in impl.in_edges(dst) if isinstance(data.get("slot"), int)}
        free = (i for i in range(len(taken) + count) if i not in taken)
        used: dict[str, int] = {}
        slotless_keys: dict[str, list] = {}
        for src in doc_order:
            if src not in slotless_keys:
                slotless_keys[src] = [k for k, data in sorted(impl.graph[src][dst].items()) if data.get("slot") is None]
            impl.graph[src][dst][slotless_keys[src][used.get(src, 0)]]["_slot"] = next(free)
            used[src] = used.get(src, 0) + 1
        for _, _, data in impl.in_edges(dst):
            if "_slot" in data:
                data["slot"] = data.pop("_slot")


def _valid_slot(slot: Any) -> bool:
    path = slot_path(slot)
    if not path or not all(isinstance(p, (int, str)) and not isinstance(p, bool) for p in path):
        return False
    head = path[0]
    return (isinstance(head, int) and head >= 0) or (isinstance(head, str) and bool(head))


def parse_state(raw: Any, value_fn: ValueFn, where: str, impl: str) -> dict[str, dict[str, Any]]:
    expect(raw, Mapping, f"{where}.state", impl)
    import torch

    from .torchao_tensors import CLASSES as SUBCLASSES

    out: dict[str, dict[str, Any]] = {}
    for name, rec in raw.items():
        rwhere = f"{where}.state[{name!r}]"
        if not isinstance(name, str) or not name:
            raise IRFormatError(f"state name {name!r} is not a non-empty string", implementation=impl, key=rwhere)
        expect(rec, Mapping, rwhere, impl)
        rec = {str(k): value_fn(v, f"{rwhere}.{k}") for k, v in rec.items()}
        if rec.get("kind") not in STATE_KINDS:
            raise IRFormatError(f"state {name!r} has kind {rec.get('kind')!r}", implementation=impl,
                                key=rwhere, hint=f"use one of {', '.join(STATE_KINDS)}")
        shape = rec.get("shape")
        if not isinstance(shape, (list, tuple)) or not all(
            (isinstance(s, int) and not isinstance(s, bool) and s >= 0) or isinstance(s, str) for s in shape
        ):
            raise IRFormatError(f"state {name!r} has invalid shape {shape!r}", implementation=impl, key=rwhere,
                                hint="a shape is a list of non-negative ints (or symbol names)")
        if not isinstance(rec.get("dtype"), torch.dtype):
            raise IRFormatError(f"state {name!r} has invalid dtype {rec.get('dtype')!r}", implementation=impl,
                                key=rwhere, hint="use a torch.dtype (in JSON: {'$dtype': 'float32'})")
        if "subclass" in rec and (rec["kind"] != "parameter" or not isinstance(rec["subclass"], str)
                                  or rec["subclass"] not in SUBCLASSES):
            raise IRFormatError(f"state {name!r} has subclass {rec['subclass']!r}", implementation=impl,
                                key=f"{rwhere}.subclass",
                                hint=f"a parameter's subclass is one of {', '.join(SUBCLASSES)} (torchao's weights)")
        out[name] = rec
    return out


#: Most per-call graphs one implementation may have.
MAX_VARIANTS = 64


def parse_variants(impl: Any, raw: Any, value_fn: ValueFn, where: str) -> None:
    """Parse an implementation's ``variants`` (its per-call graphs, ``[{"nodes", "edges"}, ...]``) into it."""
    if not isinstance(raw, list) or len(raw) > MAX_VARIANTS:
        raise IRFormatError(f"'variants' must be a list of at most {MAX_VARIANTS} graphs", implementation=impl.name,
                            key=f"{where}.variants")
    for i, graph in enumerate(raw):
        vwhere = f"{where}.variants[{i}]"
        expect(graph, Mapping, vwhere, impl.name)
        extra = set(graph) - {"nodes", "edges"}
        if extra:
            raise IRFormatError(f"a variant has unknown fields {sorted(map(str, extra))}", implementation=impl.name,
                                key=vwhere, hint="a variant holds 'nodes' and 'edges' only")
        variant = impl.add_variant()
        parse_nodes(variant, graph.get("nodes", {}), value_fn, vwhere)
        parse_edges(variant, graph.get("edges", {}), value_fn, vwhere)


def budget_error(what: str, count: int, limit: int, max_nodes: int, *, key: str,
                 implementation: str | None = None) -> IRFormatError:
    """The error of a document over its node budget: names the document key and ``max_nodes``."""
    return IRFormatError(
        f"the document holds more than {limit} {what} ({count} counted so far), over its budget of "
        f"max_nodes={max_nodes} nodes in all graphs and variants of all implementations",
        implementation=implementation, key=key,
        hint=f"if the file is trusted, load it with a larger budget: max_nodes= of IR.load / IR.from_dict / "
             f"FlatIR.load (now {max_nodes}; None disables it)",
    )


def check_max_nodes(max_nodes: Any) -> None:
    """Refuse a ``max_nodes`` that is neither None nor a positive int.

    Raises:
        TypeError: it is a bool or not an int; ValueError: it is not positive.
    """
    if max_nodes is None:
        return
    if isinstance(max_nodes, bool) or not isinstance(max_nodes, int):
        raise TypeError(f"max_nodes must be a positive int or None, not {type(max_nodes).__name__}")
    if max_nodes < 1:
        raise ValueError(f"max_nodes must be positive, got {max_nodes}")


def check_node_budget(impls: Mapping[str, Any], max_nodes: int | None, where: str = "implementations") -> None:
    """Count the nodes and edges of every graph and variant of ``impls`` (implementation key -> plain dict)
    before anything is built, and refuse a document over the budget: ``max_nodes`` nodes and
    ``EDGES_PER_NODE * max_nodes`` edges in all, and at most ``max_nodes`` implementations.

    Malformed entries are not counted (parsing reports them). ``max_nodes=None`` disables the check.

    Raises:
        IRFormatError: over the budget, naming the key where the count passed it and ``max_nodes``.
    """
    if max_nodes is None:
        return
    check_max_nodes(max_nodes)
    if len(impls) > max_nodes:
        raise budget_error("implementations", len(impls), max_nodes, max_nodes, key=where)
    max_edges = EDGES_PER_NODE * max_nodes
    nodes = edges = 0
    for key, d in impls.items():
        if not isinstance(d, Mapping):
            continue
        pending = deque([(f"{where}[{key!r}]", d)])
        while pending:  # the implementation's graph, its variants, and the bodies of higher-order ops inside them
            gwhere, graph = pending.popleft()
            variants = graph.get("variants")
            if isinstance(variants, list):
                pending += [(f"{gwhere}.variants[{i}]", g) for i, g in enumerate(variants[:MAX_VARIANTS + 1])
                            if isinstance(g, Mapping)]
            raw = graph.get("nodes")
            nodes += len(raw) if isinstance(raw, (Mapping, list)) else 0
            if nodes > max_nodes:
                raise budget_error("nodes", nodes, max_nodes, max_nodes, key=f"{gwhere}.nodes",
                                   implementation=str(key))
            raw_edges = graph.get("edges")
            edges += len(raw_edges) if isinstance(raw_edges, (Mapping, list)) else 0
            if edges > max_edges:
                raise budget_error("edges", edges, max_edges, max_nodes, key=f"{gwhere}.edges",
                                   implementation=str(key))
            for node in (raw.values() if isinstance(raw, Mapping) else raw if isinstance(raw, list) else ()):
                if isinstance(node, Mapping):
                    name = node.get("name")
                    label = repr(name[:80]) if isinstance(name, str) else "?"
                    pending += [(f"{gwhere}.nodes[{label}].$graph", body)
                                for body in subgraph_bodies((node.get("args"), node.get("kwargs")))]


def subgraph_bodies(value: Any) -> list[Mapping[str, Any]]:
    """The plain dicts of the higher-order op bodies (``{"$graph": {...}}``) found in a node's arguments, not
    looking inside them (their own nodes' arguments are searched when they are counted). Iterative: a file's
    nesting never reaches Python's recursion limit here."""
    found: list[Mapping[str, Any]] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            body = item.get("$graph") if len(item) == 1 else None
            if isinstance(body, Mapping):
                found.append(body)
            else:
                stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return found

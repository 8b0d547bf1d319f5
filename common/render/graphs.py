"""The graphs that get drawn: a module hierarchy (a tree) or one graph of operators (a DAG).

Every builder returns a ``networkx.DiGraph`` in one small drawing vocabulary, so the DOT, Mermaid and
matplotlib writers need to know nothing about IRs:

- graph attributes: ``layout`` (``"tree"``: a hierarchy drawn left to right; ``"layers"``: a dataflow
  DAG drawn top to bottom) and ``title``;
- node attributes: ``label`` (lines joined by ``"\\n"``), ``kind`` (picks the colour: ``root``,
  ``graph``, ``leaf``, ``module`` (a module of a FlatIR), ``container``, ``alias``, ``collapsed``,
  ``input``, ``output``, ``function``, ``get_attr``, ``call``, ``weight``, ``op``, ``external``) and
  ``path`` (the full module path or node name the node stands for).

``depth`` collapses deeper modules into their ancestor at that depth, which then says how many modules
it hides: a 100-module model drawn with ``depth=3`` stays readable. ``collapse`` (on by default) draws a
run of identical blocks (``layers.0`` .. ``layers.31``) once, named ``0-31 x32``, with a ``repeat`` node
attribute (see :mod:`common.render.repeats`).
"""

from __future__ import annotations

from collections.abc import Iterable

import networkx as nx

from ..errors import IRError
from ..flat import FlatIR
from ..ir import IR, parent_key
from .repeats import flat_signatures, fold_repeats, ir_signatures, repeat_name

__all__ = ["RenderError", "compact_count", "flat_hierarchy_graph", "flat_ops_graph", "hierarchy_graph",
           "implementation_graph"]

CONTAINERS = frozenset({"sequential", "modulelist", "moduledict"})


class RenderError(IRError):
    """A picture cannot be made (unknown format, missing matplotlib, too large an image, no such module)."""


def _short(path: str) -> str:
    """The last component of a dotted path (``"encoder.layer.0"`` -> ``"0"``)."""
    return path.rsplit(".", 1)[-1]


def compact_count(n: int) -> str:
    """``1234`` -> ``"1.2k"``: a compact element count."""
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)


def _tree(paths: Iterable[str]) -> nx.DiGraph:
    """A tree with ``"root"`` over dotted ``paths`` (each attached to its nearest present prefix)."""
    ordered = ["root", *(p for p in paths if p != "root")]
    known = set(ordered)
    tree = nx.DiGraph(layout="tree")
    tree.add_nodes_from(ordered)
    for path in ordered[1:]:
        tree.add_edge(parent_key(path, known), path)
    return tree


def _collapse(tree: nx.DiGraph, depth: int | None) -> nx.DiGraph:
    """Drop the nodes deeper than ``depth``, counting them (``hidden``) on their kept ancestor."""
    if depth is None:
        return tree
    if depth < 0:
        raise RenderError(f"depth must be 0 or more, got {depth}", hint="pass --depth 1, 2, ...")
    levels = nx.single_source_shortest_path_length(tree, "root")
    keep = [n for n in tree if levels[n] <= depth]
    out = tree.subgraph(keep).copy()
    for node in keep:
        if levels[node] == depth:
            hidden = nx.descendants(tree, node)
            if hidden:
                out.nodes[node]["hidden"] = len(hidden)
                out.nodes[node]["hidden_nodes"] = sorted(hidden)
    return out


def hierarchy_graph(ir: IR, depth: int | None = None, *, collapse: bool = True) -> nx.DiGraph:
    """The module tree of ``ir``: one node per implementation key and per alias path.

    Args:
        ir: a module-level IR.
        depth: keep modules down to this depth (``root`` is 0) and fold deeper ones into their ancestor.
        collapse: draw each run of identical integer-named siblings once (``0-31 x32``); its counts are
            those of one block (``each``).

    Returns:
        A ``layout="tree"`` graph; labels hold the module's name, its class (or IR type) and,
        for modules owning parameters and for folded subtrees, a parameter count.

    Raises:
        RenderError: ``depth`` is negative.
    """
    aliases = {alias: key for key, impl in ir.items() for alias in impl.aliases}
    tree = _tree([*ir.keys(), *aliases])
    own = {key: _own_params(impl.state) for key, impl in ir.items()}
    tree = _collapse(tree, depth)
    if collapse:
        tree = fold_repeats(tree, ir_signatures(ir))
    root_class = ir["root"].meta.get("class", "") if "root" in ir else ""
    tree.graph["title"] = f"module hierarchy of {_short(root_class) or 'the model'}: {len(ir)} implementations"
    for node in tree:
        attrs = tree.nodes[node]
        attrs["path"] = node
        if node in aliases:
            attrs.update(kind="alias", label=f"{_short(node)}\n= {aliases[node]}")
            continue
        impl = ir.get(node)
        name = "root" if node == "root" else _short(node)
        each = ""
        if "repeat" in attrs:
            name, each = repeat_name(attrs["repeat"]), " each"
        if impl is None:  # a prefix that is not itself a module (cannot happen for IRs from torch2ir)
            attrs.update(kind="graph", label=name)
            continue
        cls = _short(impl.meta.get("class", "")) or impl.type
        lines = [name, cls if cls.lower() == impl.type or impl.type == "module" else f"{cls} ({impl.type})"]
        if "hidden" in attrs:
            params = own[node] + sum(own.get(h, 0) for h in attrs["hidden_nodes"] if h not in aliases)
            lines.append(f"{_plus(attrs.pop('hidden'))}, {compact_count(params)} params{each}")
            attrs.pop("hidden_nodes")
            kind = "collapsed"
        else:
            if own[node]:
                lines.append(f"{compact_count(own[node])} params{each}")
            kind = "root" if node == "root" else "container" if impl.type in CONTAINERS else (
                "graph" if impl.type == "module" else "leaf")
        attrs.update(kind=kind, label="\n".join(lines))
    return tree


def _own_params(state: dict) -> int:
    """Elements of the parameters an implementation owns (tied ones counted once, at their owner)."""
    total = 0
    for rec in state.values():
        if rec.get("kind") == "parameter" and not isinstance(rec.get("tie"), str):
            n = 1
            for dim in rec.get("shape", []):
                n *= dim if isinstance(dim, int) else 1
            total += n
    return total


def implementation_graph(ir: IR, key: str) -> nx.DiGraph:
    """The graph of implementation ``key``: inputs, function calls, state reads, module calls, output.

    Raises:
        MissingImplementationError: ``ir`` has no implementation ``key`` (names the nearest keys).
    """
    impl = ir[key]
    out = nx.DiGraph(layout="layers", title=f"graph of {key!r} ({impl.type}): {impl.graph.number_of_nodes()} nodes")
    for name, attrs in impl.graph.nodes(data=True):
        ntype = attrs.get("type", "")
        target = str(attrs.get("implementation", ""))
        if ntype in ("input", "output"):
            kind, detail = ntype, ntype
        elif ntype == "function":
            kind, detail = "function", target.removeprefix("aten.").removesuffix(".default")
        elif ntype == "get_attr":
            kind, detail = "get_attr", f"self.{target}"
        else:
            local = target.removeprefix(f"{key}.") if key != "root" else target
            kind, detail = "call", ntype if local == name else f"{local}: {ntype}"
        out.add_node(name, kind=kind, label=f"{name}\n{detail}" if detail != name else name, path=name)
    out.add_edges_from((u, v) for u, v in impl.graph.edges() if u != v)
    return out


def _plus(n: int) -> str:
    return f"+{n} module" if n == 1 else f"+{n} modules"


def _ops(n: int) -> str:
    return f"{n} op" if n == 1 else f"{n} ops"


def flat_hierarchy_graph(flat: FlatIR, depth: int | None = None, *, collapse: bool = True) -> nx.DiGraph:
    """The module tree a FlatIR's ops ran in, each module labelled with the number of ops it ran itself.

    ``collapse``: draw each run of integer-named sibling modules that ran the same ops once (``0-31 x32``).

    Raises:
        RenderError: ``depth`` is negative.
    """
    ops: dict[str, int] = {}
    for node in flat.nodes:
        ops[node.module_path] = ops.get(node.module_path, 0) + 1
    paths: dict[str, None] = {}
    for path in ops:
        if path == "root":
            continue
        parts = path.split(".")
        for cut in range(1, len(parts) + 1):
            paths[".".join(parts[:cut])] = None
    tree = _collapse(_tree(paths), depth)
    if collapse:
        tree = fold_repeats(tree, flat_signatures(flat))
    tree.graph["title"] = f"modules of {_short(str(flat.meta.get('model', 'the model')))}: {len(flat.nodes)} ops"
    for node in tree:
        attrs = tree.nodes[node]
        name = "root" if node == "root" else _short(node)
        each = ""
        if "repeat" in attrs:
            name, each = repeat_name(attrs["repeat"]), " each"
        lines = [name, _ops(ops.get(node, 0)) + each]
        if "hidden" in attrs:
            inner = sum(ops.get(h, 0) for h in attrs.pop("hidden_nodes"))
            lines[1] = _ops(ops.get(node, 0) + inner) + each
            lines.append(_plus(attrs.pop("hidden")))
            kind = "collapsed"
        else:
            kind = "root" if node == "root" else "module"
        attrs.update(kind=kind, label="\n".join(lines), path=node)
    return tree


def flat_ops_graph(flat: FlatIR, module: str | None = None) -> nx.DiGraph:
    """The dataflow of the ops that ran in ``module`` (and its submodules), with the values they read.

    Args:
        flat: a FlatIR.
        module: a module path (``None`` or ``"root"``: every op of the model).

    Raises:
        RenderError: no op ran in ``module``.
    """
    whole = module in (None, "", "root")
    inside = {n.name for n in flat.nodes
              if whole or n.module_path == module or n.module_path.startswith(f"{module}.")}
    if not inside:
        known = sorted({n.module_path for n in flat.nodes})
        raise RenderError(f"no op of the FlatIR ran in module {module!r}", key=str(module),
                          hint=f"module paths with ops: {', '.join(known[:8])}{', ...' if len(known) > 8 else ''}")
    full = flat.graph
    out = nx.DiGraph(layout="layers", title=f"ops of {'the model' if whole else repr(module)}: {len(inside)} ops")
    by_name = {n.name: n for n in flat.nodes}
    for name in full:  # graph order: inputs, weights, then ops in execution order
        attrs = full.nodes[name]
        reads_in = any(v in inside for v in full.successors(name))
        if name in inside:
            node = by_name[name]
            op = node.op_type.removeprefix("aten.").removesuffix(".default")
            out.add_node(name, kind="op", label=name if name == op else f"{name}\n{op}", path=name)
        elif name == "output" and whole:
            out.add_node(name, kind="output", label="output", path=name)
        elif reads_in and attrs["kind"] in ("input", "weight"):
            target = str(attrs.get("target") or name)
            local = target if whole else target.removeprefix(f"{module}.")
            label = name if attrs["kind"] == "input" else f"{local}\n{attrs['meta'].kind}"
            out.add_node(name, kind=attrs["kind"], label=label, path=name)
        elif reads_in:
            out.add_node(name, kind="external", label=f"{name}\n(outside)", path=name)
    out.add_edges_from((u, v) for u, v in full.edges() if u in out and v in out)
    return out

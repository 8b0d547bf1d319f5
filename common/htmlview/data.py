"""The data an interactive view embeds: the module tree with its runs of identical blocks, and per implementation
its attributes, state records, meta and graphs, every value already turned into display text.

The page's script only lays things out; it never interprets a value. Every string here comes from the IR and is
shown as text (``textContent``), never as markup. The document, one JSON object:

- ``title``, ``summary`` (the header lines of :func:`common.textview.ir_summary_lines`);
- ``nodes``: the tree in depth-first order (index 0 is ``root``), each ``{"p": path, "n": short name,
  "c": class or type, "t": IR type, "k": kind, "x": parameter count text, "ch": children}``; a child is a node
  index, or ``[label, [indices]]`` for a run of identical blocks (``["layers.0\u201379 \u00d780", [4, 17, ...]]``:
  with an en dash and a multiplication sign);
- ``impls``: path -> ``{"cls", "a": attributes, "s": state records, "m": meta, "al": aliases, "g": graphs}``,
  ``a``/``m`` as ``[[name, text]]``, ``s`` as ``[[name, kind, "f32[4, 8]", extra]]``, each graph as
  ``{"n": [[name, kind, op, output text, arguments text, implementation called(, binding)]], "e": [[src, dst,
  label]]}`` (node indices; the label is the tensor the edge carries, from the source node's ``meta``; a call of a
  module with a graph has a binding, ``[variant, [caller node index or -1 per callee input]]``, to draw the callee's
  graph in place of the call); ``"h"`` (only when there are any): the indices of the export plumbing the page hides
  until asked (:func:`plumbing`);
- ``ov`` (only with an overlay, :mod:`common.htmlview.overlay`): ``{"name", "m": {module path: [value, text]},
  "n": {"path:node": [value, text]}, "lo", "hi", "unmatched"}``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..bodies import relocate
from ..calls import argument_leaves
from ..ir import IR, Implementation
from ..render.graphs import hierarchy_graph
from ..render.repeats import ir_signatures, repeat_runs
from ..textview import call_args, ir_summary_lines, meta_text, shared_groups, tensor_text, value_text
from ..values import Ref

__all__ = ["MAX_TEXT", "call_leaves", "overlay_keys", "plumbing", "produced", "view_data"]

#: longest value text embedded; a longer one is cut and says how many characters it drops
MAX_TEXT = 4000


def _clip(text: str) -> str:
    if len(text) <= MAX_TEXT:
        return text
    return f"{text[:MAX_TEXT]} … ({len(text) - MAX_TEXT} more characters not shown)"


def _text(value: Any) -> str:
    """A value as display text: strings as they are, anything else as code (``value_text``)."""
    return _clip(value if isinstance(value, str) else value_text(value))


def _short(path: str) -> str:
    return path.rsplit(".", 1)[-1]


def _run_label(members: list[str]) -> str:
    """``layers.0\u201379 \u00d780``: the parent's short name, the first and last index and the count."""
    parent = members[0].rpartition(".")[0]
    head = f"{_short(parent)}." if parent else ""
    return f"{head}{_short(members[0])}\u2013{_short(members[-1])} \u00d7{len(members)}"


def _item(meta: Any, index: Any) -> Any:
    """The ``index``-th item of a recorded multi-output ``meta`` (``None`` when there is no such item)."""
    if index is None:
        return meta
    if isinstance(meta, list | tuple) and isinstance(index, int) and 0 <= index < len(meta):
        return meta[index]
    return None


def _spec_leaves(spec: Any) -> tuple[bool, int] | None:
    """``(True, 1)`` when a module's ``out_spec`` is one leaf, ``(False, k)`` when it is one flat tuple or list of
    ``k`` leaves, ``None`` for anything else (a nest, a dict, a model output class, no spec)."""
    try:
        doc = json.loads(spec)[1]
        if doc.get("type") is None:
            return True, 1
        if doc.get("type") not in ("builtins.tuple", "builtins.list"):
            return None
        kids = doc.get("children_spec", [])
        return (False, len(kids)) if all(k.get("type") is None for k in kids) else None
    except (TypeError, ValueError, KeyError, IndexError, AttributeError):
        return None


def produced(ir: IR, impl: Implementation, name: str, index: Any = None, depth: int = 0) -> Any:
    """The recorded ``meta`` of what node ``name`` of ``impl`` gives (its ``index``-th item), or ``None``.

    A node's own ``meta`` when it has one (a get_attr's state record); a call of a module with a graph (which
    records none) gives what the callee's graph returns (the output node's leaves, shaped by the callee's
    ``out_spec``) when that is one value or an item of one flat tuple. Anything else gives ``None``: no label
    rather than a wrong one.
    """
    attrs = impl.graph.nodes[name]
    ntype, target = attrs.get("type"), attrs.get("implementation")
    meta = attrs.get("meta")
    if meta is None and ntype == "get_attr":
        meta = impl.state.get(str(target))
    if meta is not None or ntype in ("input", "output", "function", "get_attr") or depth > 32:
        return _item(meta, index)
    callee = ir.get(target) if isinstance(target, str) else None
    variant = attrs.get("variant") or 0
    if callee is None or not isinstance(variant, int) or not 0 <= variant < len(callee.graphs()):
        return None
    graph = callee.graphs()[variant]
    ends = [a for _, a in graph.graph.nodes(data=True) if a.get("type") == "output"]
    args = ends[0].get("args") if len(ends) == 1 else None
    if not isinstance(args, list | tuple) or len(args) != 1:
        return None
    leaves, spec = args[0], _spec_leaves(callee.meta.get("out_spec"))  # the output's leaves, then its structure
    if not isinstance(leaves, list | tuple) or spec is None or spec[1] != len(leaves):
        return None
    if spec[0]:  # one value
        value = _item(leaves[0], index)
    else:
        value = _item(leaves, index)
    if isinstance(value, Ref) and value.node in graph.graph:
        return produced(ir, graph, value.node, value.index, depth + 1)
    return None


def _edge_label(ir: IR, impl: Implementation, src: str, index: Any) -> str:
    """The tensor an edge carries: what its source gives (see :func:`produced`), as ``f32[1, 16, 64]``."""
    meta = produced(ir, impl, src, index)
    return _clip(meta_text(meta) or "") if meta is not None else ""


#: operators export writes only to check what it assumed (a tensor's metadata, a symbolic size's range): read by no
#: other node, they carry no value of the model
CHECKS = ("aten._assert", "aten._functional_assert", "aten.sym_constrain_range", "aten._functional_sym_constrain")


def plumbing(impl: Implementation) -> list[str]:
    """The nodes of ``impl``'s graph the view hides by default: export's checks (``_assert_tensor_metadata``,
    ``_assert_scalar``, ``sym_constrain_range``...) and inputs that record no value (a ``None`` argument such as
    ``past_key_values=None``), when nothing reads them. Hiding them never cuts a path of the drawing."""
    graph, out = impl.graph, []
    for name, attrs in graph.nodes(data=True):
        if any(dst != name for dst in graph.successors(name)):
            continue
        ntype, target = attrs.get("type"), str(attrs.get("implementation", ""))
        if (ntype == "function" and target.startswith(CHECKS)) or (ntype == "input" and attrs.get("meta") is None):
            out.append(str(name))
    return out


def _graph(impl: Implementation, key: str, ir: IR) -> dict[str, Any]:
    """One graph of ``impl`` (itself or a variant) as node rows and labelled edges by node index."""
    index = {name: i for i, name in enumerate(impl.graph.nodes)}
    nodes = []
    for name, attrs in impl.graph.nodes(data=True):
        ntype = str(attrs.get("type", ""))
        target = str(attrs.get("implementation", ""))
        called = ""
        if ntype in ("input", "output"):
            kind, op = ntype, ""
        elif ntype == "function":
            kind, op = "function", target.removeprefix("aten.").removesuffix(".default")
        elif ntype == "get_attr":
            kind, op = "get_attr", f"self.{target}"
        else:
            local = target.removeprefix(f"{key}.") if key != "root" else target
            called = target if target in ir else ""
            shown = _short(str(ir[called].meta.get("class", ""))) or ntype if called else ntype
            kind, op = "call", shown if local == name else f"{local}: {shown}"
        meta = produced(ir, impl, name)
        out = meta_text(meta) if meta is not None else None
        row = [str(name), kind, _clip(op), _clip(out or ""), _clip(call_args(impl, name, attrs)), called]
        if called:
            binding = _binding(ir[called], attrs, index)
            if binding is not None:
                row.append(binding)
        nodes.append(row)
    edges = []
    for src, dst, attrs in impl.graph.edges(data=True):
        if src != dst:
            label = _edge_label(ir, impl, src, attrs.get("src_index"))
            edges.append([index[src], index[dst], label])
    out: dict[str, Any] = {"n": nodes, "e": edges}
    hidden = plumbing(impl)
    if hidden:
        out["h"] = [index[name] for name in hidden]
    return out


def call_leaves(callee: Implementation, attrs: Mapping[str, Any]) -> tuple[int, list[Any]] | None:
    """What a call node (its attributes) passes to each input node of the graph it runs: ``(variant, [value per
    input])``, each value a :class:`~common.values.Ref` or a constant (:func:`common.calls.argument_leaves`); ``None``
    when the callee runs no graph or the arguments do not line up with its inputs."""
    variant = attrs.get("variant") or 0
    source = callee.shared_body or callee
    if not callee.node_count or type(variant) is not int or not 0 <= variant <= callee.variant_count:
        return None
    graph = source.graphs()[variant].graph
    inputs = [n for n, a in graph.nodes(data=True) if a.get("type") == "input"]
    args, kwargs = attrs.get("args"), attrs.get("kwargs", {})
    if not isinstance(args, list | tuple) or not isinstance(kwargs, Mapping):
        return None
    leaves = argument_leaves(args, kwargs, isinstance(callee.meta.get("in_spec"), str))
    return (variant, leaves) if len(leaves) == len(inputs) else None


def _binding(callee: Implementation, attrs: Mapping[str, Any], index: Mapping[str, int]) -> list[Any] | None:
    """How a call feeds the graph it runs, for drawing that graph in place of the call: ``[variant, [source]]``, one
    source per input node of the callee's graph (the caller's node index, or ``-1`` for a constant; see
    :func:`call_leaves`); ``None`` when the call is not expandable."""
    bound = call_leaves(callee, attrs)
    if bound is None:
        return None
    return [bound[0], [index.get(v.node, -1) if isinstance(v, Ref) else -1 for v in bound[1]]]


def _details(ir: IR, key: str, shared: tuple[str, int] | None = None,
             graphs: dict[str, list[dict[str, Any]]] | None = None) -> dict[str, Any]:
    """The side panel's data of ``key``; ``shared``: ``(home, instances)`` of its shared body, whose graphs the
    page holds once, under the home (``graphs``: the graphs made so far, by key)."""
    impl = ir[key]
    state = []
    for attr, rec in impl.state.items():
        extra = [f"{k}={_text(v)}" for k, v in rec.items() if k not in ("kind", "shape", "dtype")]
        state.append([str(attr), str(rec.get("kind", "state")), tensor_text(rec, short=True), ", ".join(extra)])
    out: dict[str, Any] = {
        "cls": str(impl.meta.get("class", "")),
        "a": [[str(k), _text(v)] for k, v in impl.data.items()],
        "s": state,
        "m": [[str(k), _text(v)] for k, v in impl.meta.items()],
        "al": [str(a) for a in impl.aliases],
    }
    own = [_graph(g, key, ir) for g in impl.graphs()] if impl.node_count else []
    if shared is not None:
        out["sb"] = list(shared)
        home = (graphs or {}).get(shared[0])
        if shared[0] != key and home is not None:
            rows = _rows_over(home, own, shared[0], key)
            if rows is not None:  # the page relocates the home's graphs; rows that read otherwise are given
                if rows:
                    out["ro"] = rows
                return out
    out["g"] = own
    if graphs is not None:
        graphs[key] = own
    return out


def _rows_over(home: list[dict[str, Any]], own: list[dict[str, Any]], home_key: str,
               key: str) -> list[list[Any]] | None:
    """The node rows of ``own`` (an instance's graphs) that differ from the home's once its calls are relocated
    (a called child of another class, another output), as ``[graph, row index, row]``; ``None`` when the graphs
    differ in more than rows (edges, node count): the page then holds the instance's own."""
    if len(home) != len(own):
        return None
    out = []
    for v, (h, o) in enumerate(zip(home, own, strict=True)):
        if h["e"] != o["e"] or len(h["n"]) != len(o["n"]) or h.get("h") != o.get("h"):
            return None
        for i, (hr, orow) in enumerate(zip(h["n"], o["n"], strict=True)):
            if hr[:5] != orow[:5] or relocate(hr[5], home_key, key) != orow[5]:
                out.append([v, i, orow])
    return out


def view_data(ir: IR, overlay: Mapping[str, float | None] | None = None, overlay_name: str = "overlay",
              ) -> dict[str, Any]:
    """The JSON document of the interactive view of ``ir`` (see the module docstring); with ``overlay`` (checked by
    :func:`common.htmlview.overlay.check_overlay`), also ``ov`` (:func:`common.htmlview.overlay.overlay_data`)."""
    tree = hierarchy_graph(ir, None, collapse=False)
    runs = repeat_runs(tree, ir_signatures(ir))
    order = ["root", *(n for n in _depth_first(tree) if n != "root")] if "root" in tree else list(tree)
    ids = {path: i for i, path in enumerate(order)}
    nodes = []
    for path in order:
        attrs = tree.nodes[path]
        lines = str(attrs.get("label", path)).split("\n")
        impl = ir.get(path)
        kids = list(tree.successors(path))
        children: list[Any] = []
        i = 0
        while i < len(kids):
            run = runs.get(kids[i])
            if run is not None:
                members = run[3]
                children.append([_run_label(members), [ids[m] for m in members]])
                i += len(members)
            else:
                children.append(ids[kids[i]])
                i += 1
        nodes.append({"p": path, "n": "root" if path == "root" else _short(path),
                      "c": lines[1] if len(lines) > 1 else "", "t": impl.type if impl is not None else "",
                      "k": str(attrs.get("kind", "")), "x": lines[2] if len(lines) > 2 else "", "ch": children})
    root = ir.get("root")
    title = str(root.meta.get("class", "")) if root is not None else ""
    shared = {key: (home, len(keys)) for home, keys in shared_groups(ir).items() for key in keys}
    graphs: dict[str, list[dict[str, Any]]] = {}
    data = {
        "title": _short(title) or "IR",
        "summary": [_clip(line) for line in ir_summary_lines(ir)[:5]],
        "nodes": nodes,
        "impls": {key: _details(ir, key, shared.get(key), graphs) for key in ir},
    }
    if overlay is not None:
        from .overlay import overlay_data

        data["ov"] = overlay_data(overlay, {n["p"] for n in nodes}, _graph_nodes(ir), overlay_name)
    return data


def _graph_nodes(ir: IR) -> set[str]:
    return {f"{key}:{name}" for key, impl in ir.items() for g in (impl.shared_body or impl).graphs()
            for name in g.nodes}


def overlay_keys(ir: IR) -> set[str]:
    """Every key an overlay of ``ir`` may use: module paths (aliases included) and ``"path:node"``."""
    tree = hierarchy_graph(ir, None, collapse=False)
    return set(tree.nodes) | _graph_nodes(ir)


def _depth_first(tree: Any) -> list[str]:
    """The tree's nodes, parents before children, children in module order (no recursion: deep trees are fine)."""
    out: list[str] = []
    stack = ["root"]
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(reversed(list(tree.successors(node))))
    return out

"""An IR as one Model Explorer graph, module calls expanded into layers (see :mod:`common.explorer`).

The graph is plain JSON in Model Explorer's graph format (what ``dataclasses.asdict`` of its
``graph_builder.Graph`` gives): ``{"id", "nodes": [{"id", "label", "namespace", "subgraphIds", "attrs":
[{"key", "value"}], "incomingEdges": [{"sourceNodeId", "sourceNodeOutputId", "targetNodeInputId"}],
"outputsMetadata": [{"id", "attrs"}], "inputsMetadata", "style", "config"}], "groupNodeAttributes",
"groupNodeConfigs", "nodeLabelsToHide", "tasksData", "layoutConfigs"}``.

Expansion: the root's graph is walked node by node; a call of a module rebuilt from its graph walks that graph in
the module's layer (its path with ``/`` for ``.``; the per-call graph the call names, if any), the callee's inputs
fed by the call's arguments (bound as the rebuild binds them, :func:`common.htmlview.data.call_leaves`) and the
call's readers reading the callee's output node; a module called several times is expanded once per call (node ids
carry the call's number). A module rebuilt by its handler is one node. An instance of a shared body
is walked in its body's graph, the calls relocated (nothing of the IR is expanded or changed). Every string comes
from the IR and stays data: Model Explorer shows labels and attributes as text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..bodies import relocate
from ..errors import IRFormatError
from ..htmlview.data import call_leaves
from ..ir import IR, Implementation
from ..schema import NODE_KINDS, slot_path
from ..textview import call_args, meta_text
from ..values import Ref

__all__ = ["ADAPTER_ID", "MAX_NODES", "explorer_graph", "layer", "node_data"]

#: The id of the adapter (:mod:`common.explorer.main`) in Model Explorer.
ADAPTER_ID = "torch2ir_ir"
#: Nodes of one expanded graph at most: calls expand per call, so a file within its own node budget could still
#: expand past what a browser draws; beyond this the graph is refused, naming the count.
MAX_NODES = 2_000_000


def layer(path: str) -> str:
    """Model Explorer's namespace of module ``path``: ``layers.3.mlp`` -> ``layers/3/mlp`` (the root: ``""``); a
    ``/`` inside a module name is shown as a division slash, so it cannot open a layer of its own."""
    if path == "root":
        return ""
    return "/".join(part.replace("/", "\u2215") for part in path.split("."))


def _graph_of(impl: Implementation, variant: int) -> tuple[Any, str | None]:
    """The graph a call of ``impl`` runs (``variant``: its per-call graph, 0 the main one) and, for an instance of a
    shared body, the body's home (its calls relocate); nothing of the IR is expanded."""
    source = impl.shared_body or impl
    graphs = source.graphs()
    if not 0 <= variant < len(graphs):
        raise IRFormatError(f"a call runs per-call graph {variant} of {impl.name!r}, which has {len(graphs)}",
                            implementation=impl.name)
    return graphs[variant].graph, impl.body


def _kv(key: str, value: Any) -> dict[str, str]:
    return {"key": key, "value": str(value)[:2000]}


def _order(slot: Any) -> tuple[int, Any]:
    path = slot_path(slot)
    head = path[0] if path else 0
    return (0, path) if isinstance(head, int) else (1, str(path))


class _Builder:
    def __init__(self, ir: IR) -> None:
        self.ir = ir
        self.nodes: list[dict[str, Any]] = []
        self.calls: dict[str, int] = {}
        #: ``{module path: [node ids of every expansion of it]}`` and ``{"path:node": node ids}``, for node data
        self.members: dict[str, list[str]] = {}
        self.named: dict[str, list[str]] = {}

    def add(self, node_id: str, label: str, namespace: str, attrs: list[dict[str, str]],
            inputs: list[tuple[str, int]], output: str | None) -> None:
        if len(self.nodes) >= MAX_NODES:
            raise IRFormatError(f"the IR expands to more than {MAX_NODES} Model Explorer nodes (every module call is "
                                "expanded)", hint="view it with ir2torch view, which draws one graph at a time")
        self.nodes.append({
            "id": node_id, "label": label, "namespace": namespace, "subgraphIds": [], "attrs": attrs,
            "incomingEdges": [{"sourceNodeId": src, "sourceNodeOutputId": str(index), "targetNodeInputId": str(i)}
                              for i, (src, index) in enumerate(inputs)],
            "outputsMetadata": [{"id": "0", "attrs": [_kv("tensor_shape", output)]}] if output else [],
            "inputsMetadata": [], "style": None, "config": None,
        })

    def walk(self, key: str, feeds: list[tuple[str, int] | None] | None, depth: int = 0, variant: int = 0) -> str:
        """Expand ``key``'s graph (``variant``: the per-call graph); ``feeds``: ``(node id, output index)`` or ``None``
        (a constant) per input node. Returns the id of its output node."""
        if depth > 256:
            raise IRFormatError("module calls nest more than 256 deep", implementation=key)
        impl = self.ir[key]
        graph, home = _graph_of(impl, variant)
        count = self.calls[key] = self.calls.get(key, 0) + 1
        prefix = f"{key}#{count}/" if count > 1 else f"{key}/"
        namespace = layer(key)
        values: dict[str, tuple[str, int | None]] = {}  # node name -> (node id, output index when fixed)
        inputs = [n for n, a in graph.nodes(data=True) if a.get("type") == "input"]
        out_id = prefix + "output"
        for name, attrs in graph.nodes(data=True):
            ntype = attrs.get("type")
            ins = []
            for src, _, edge in sorted(graph.in_edges(name, data=True), key=lambda e: _order(e[2].get("slot"))):
                if src in values and src != name:
                    node_id, base = values[src]
                    index = edge.get("src_index")
                    ins.append((node_id, index if isinstance(index, int) else (base or 0)))
            node_id = prefix + str(name)
            meta = attrs.get("meta")
            if meta is None and ntype == "get_attr":
                meta = impl.state.get(str(attrs.get("implementation")))
            output = meta_text(meta) if meta is not None else None
            common = [_kv("ir node", name), _kv("module", key)]
            if ntype == "input":
                position = inputs.index(name)
                given = feeds[position] if feeds is not None and position < len(feeds) else None
                feed = [given] if given is not None else []  # a constant argument: no edge
                self.add(node_id, str(name), namespace, common, feed, output)
            elif ntype in NODE_KINDS:
                target = str(attrs.get("implementation", ""))
                op = target.removeprefix("aten.") if ntype == "function" else (
                    f"self.{target}" if ntype == "get_attr" else ntype)
                extra = [] if ntype == "output" else \
                    [_kv("op", target), _kv("arguments", call_args(impl, name, attrs))]
                self.add(out_id if ntype == "output" else node_id, op if ntype != "output" else "output", namespace,
                         common + extra, ins, output)
            else:
                target = str(attrs.get("implementation", ""))
                callee_key = relocate(target, home, key) if home is not None else target
                callee = self.ir.get(callee_key)
                bound = call_leaves(callee, attrs) if callee is not None else None
                if bound is not None:  # its graph, each input fed by what the call passes (as the rebuild binds it)
                    feed = [(values[v.node][0], v.index if isinstance(v.index, int) else (values[v.node][1] or 0))
                            if isinstance(v, Ref) and v.node in values else None for v in bound[1]]
                    values[name] = (self.walk(callee_key, feed, depth + 1, bound[0]), None)
                    self.named.setdefault(f"{key}:{name}", []).append(values[name][0])
                    continue
                cls = str(callee.meta.get("class", "")) if callee is not None else ""
                label = cls.rsplit(".", 1)[-1] or ntype
                extra = [_kv("calls", callee_key), _kv("class", cls or ntype),
                         _kv("arguments", call_args(impl, name, attrs))]
                self.add(node_id, label, namespace, common + extra, ins, output)
                self.members.setdefault(callee_key, []).append(node_id)
            values[name] = (out_id if ntype == "output" else node_id, None)
            self.members.setdefault(key, []).append(values[name][0])
            self.named.setdefault(f"{key}:{name}", []).append(values[name][0])
        return out_id


def explorer_graph(ir: IR, graph_id: str = "model") -> dict[str, Any]:
    """``ir`` as one Model Explorer graph (plain JSON, module docstring), every module call expanded into its layer.

    Raises:
        IRFormatError: the IR has no root, its calls nest deeper than 256 or expand past :data:`MAX_NODES` nodes.
    """
    return _build(ir, graph_id)[0]


def _build(ir: IR, graph_id: str) -> tuple[dict[str, Any], _Builder]:
    if "root" not in ir:
        raise IRFormatError("the IR has no 'root' implementation", hint="the top-level module's key is 'root'")
    builder = _Builder(ir)
    builder.walk("root", None)
    graph = {"id": graph_id, "nodes": builder.nodes, "groupNodeAttributes": None, "groupNodeConfigs": None,
             "nodeLabelsToHide": None, "tasksData": None, "layoutConfigs": None}
    return graph, builder


def node_data(ir: IR, overlay: Mapping[str, float | None], graph_id: str = "model", name: str = "overlay",
              ) -> dict[str, Any]:
    """An overlay (``{module path or "path:node": number}``, :mod:`common.htmlview.overlay`) as Model Explorer's
    per-node data for :func:`explorer_graph`'s graph: ``{graph_id: {"name", "results": {node id: {"value"}},
    "gradient"}}``. A module's number goes on every node of its layer (a handled module's one node), a node's on
    that node; the more specific key wins (a child module over its parent, a node over its module); ``None`` values
    and keys naming nothing are left out.

    Raises:
        IRFormatError: as :func:`explorer_graph`, or the overlay is not one
            (:func:`common.htmlview.overlay.check_overlay`).
    """
    from ..htmlview.overlay import check_overlay

    values = check_overlay(overlay)
    _, builder = _build(ir, graph_id)
    results: dict[str, dict[str, float]] = {}
    for key in sorted(values, key=lambda k: (":" in k, k.count("."))):  # outer modules first, inner ones, nodes
        value = values[key]
        if value is None:
            continue
        for node_id in (builder.named if ":" in key else builder.members).get(key, []):
            results[node_id] = {"value": value}
    return {graph_id: {"name": name, "results": results,
                       "gradient": [{"stop": 0, "bgColor": "#fff5c2"}, {"stop": 1, "bgColor": "#e0301e"}]}}

"""The Model Explorer adapter: ``model-explorer model.ir.json --extensions=common.explorer`` (see
:mod:`common.explorer`). Model Explorer imports this module as ``<extension>.main`` and registers the
:class:`IRAdapter` it defines; importing it needs the ``ai-edge-model-explorer`` package."""

from __future__ import annotations

from typing import Any

from model_explorer import Adapter, AdapterMetadata, ModelExplorerGraphs, graph_builder

from ..ir import IR
from .graph import ADAPTER_ID, explorer_graph

__all__ = ["IRAdapter", "to_graph"]


def to_graph(data: dict[str, Any]) -> graph_builder.Graph:
    """:func:`common.explorer.explorer_graph`'s JSON as Model Explorer's own ``graph_builder`` objects."""

    def kvs(items: list[dict[str, str]]) -> list[graph_builder.KeyValue]:
        return [graph_builder.KeyValue(key=i["key"], value=i["value"]) for i in items]

    nodes = [graph_builder.GraphNode(
        id=n["id"], label=n["label"], namespace=n["namespace"], attrs=kvs(n["attrs"]),
        incomingEdges=[graph_builder.IncomingEdge(**e) for e in n["incomingEdges"]],
        outputsMetadata=[graph_builder.MetadataItem(id=m["id"], attrs=kvs(m["attrs"])) for m in n["outputsMetadata"]],
    ) for n in data["nodes"]]
    return graph_builder.Graph(id=data["id"], nodes=nodes)


class IRAdapter(Adapter):
    """Opens torch2ir IR files (``*.ir.json``): every module call expanded into the module's layer."""

    metadata = AdapterMetadata(id=ADAPTER_ID, name="torch2ir IR", description="Module-level IR files written by "
                               "torch2ir (read as data; module calls expanded into layers).",
                               source_repo="", fileExts=["ir.json", "json"])

    def convert(self, model_path: str, settings: dict[str, Any]) -> ModelExplorerGraphs:
        """The graph of the IR file at ``model_path`` (loaded for viewing: nothing of the model is imported)."""
        ir = IR.load(model_path, for_viewing=True)
        return {"graphs": [to_graph(explorer_graph(ir))]}

"""Give a rebuilt PT2E-prepared model what ``convert_pt2e`` reads (:mod:`common.pt2e_prepared`).

The root's checked ``meta["pt2e_prepared"]`` becomes torch.ao's ``ObservedGraphModuleAttrs`` in the rebuilt
root's ``meta["_observed_graph_module_attrs"]``, as ``prepare_pt2e`` sets it: empty defaults, ``is_qat``, and
``node_name_to_scope`` for the observed node of each observer call (found by the call's IR node, on the rebuilt
graph). Only torch's own classes are made; nothing named by the file is imported.
"""

from __future__ import annotations

from typing import Any

from torch import fx, nn

from common.ir import IR
from common.pt2e_prepared import pt2e_prepared_record


def observed_graph_module_attrs(record: dict[str, Any], graph: fx.Graph) -> Any:
    """torch.ao's ``ObservedGraphModuleAttrs`` of a checked record, for the rebuilt root graph ``graph``."""
    from torch.ao.quantization import QConfigMapping
    from torch.ao.quantization.fx.custom_config import PrepareCustomConfig
    from torch.ao.quantization.fx.utils import ObservedGraphModuleAttrs

    scopes: dict[str, tuple[str, Any]] = {}
    for node in graph.nodes:
        scope = record["scopes"].get(node.meta.get("ir_node")) if node.op == "call_module" else None
        if scope is not None and node.args and isinstance(node.args[0], fx.Node):
            path, cls = scope
            scopes[node.args[0].name] = (path, type(None) if cls is None else cls)
    return ObservedGraphModuleAttrs(
        node_name_to_qconfig={}, node_name_to_scope=scopes, prepare_custom_config=PrepareCustomConfig(),
        equalization_node_name_to_qconfig={}, qconfig_mapping=QConfigMapping(), is_qat=record["is_qat"],
        observed_node_names=set())


def restore_pt2e_prepared(ir: IR, root: nn.Module) -> None:
    """Set torch.ao's PT2E attributes on the rebuilt ``root`` when the IR's root records them.

    A root an override built (not a graph module) gets nothing: ``convert_pt2e`` refuses it, saying so.

    Raises:
        IRFormatError: the record is malformed.
    """
    record = pt2e_prepared_record(ir.root.meta) if "root" in ir else None
    if record is None or not isinstance(root, fx.GraphModule):
        return
    root.meta["_observed_graph_module_attrs"] = observed_graph_module_attrs(record, root.graph)


__all__ = ["observed_graph_module_attrs", "restore_pt2e_prepared"]

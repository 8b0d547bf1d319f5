"""Record what ``convert_pt2e`` reads from a PT2E-prepared model (:mod:`common.pt2e_prepared`).

A model of ``prepare_pt2e`` / ``prepare_qat_pt2e`` (or one rebuilt from such a model's IR) holds torch.ao's
``ObservedGraphModuleAttrs`` in ``meta["_observed_graph_module_attrs"]``. Its PT2E form (every field the empty
default but ``is_qat`` and ``node_name_to_scope``) is recorded on the IR's root as ``meta["pt2e_prepared"]``: the
scope of each observer call's observed node, keyed by the IR node of that call. Calls are paired by observer (a
shared one is called under several paths) and order: the k-th call of an observer in the model's graph is the k-th
call of its implementation in the root graph. Anything else (FX graph mode's ``prepare_fx`` attributes, calls that
do not pair) records nothing: the rebuild then lacks the attributes and torch.ao's ``convert`` refuses it, saying so.
"""

from __future__ import annotations

from typing import Any

from torch import fx, nn

from common.ir import IR
from common.pt2e_prepared import PT2E_PREPARED_KEY

_ATTRS = "_observed_graph_module_attrs"
_CALL_KINDS = frozenset({"input", "output", "function", "get_attr"})


def _pt2e_shaped(attrs: Any) -> bool:
    """True when torch.ao's attributes are those ``prepare_pt2e`` makes: only ``is_qat`` and the scopes set."""
    try:
        from torch.ao.quantization import QConfigMapping
        from torch.ao.quantization.fx.custom_config import PrepareCustomConfig

        return (type(attrs.is_qat) is bool and isinstance(attrs.node_name_to_scope, dict)
                and not attrs.node_name_to_qconfig and not attrs.equalization_node_name_to_qconfig
                and not attrs.observed_node_names and not attrs.is_observed_standalone_module
                and attrs.standalone_module_input_quantized_idxs is None
                and attrs.standalone_module_output_quantized_idxs is None
                and attrs.prepare_custom_config.to_dict() == PrepareCustomConfig().to_dict()
                and attrs.qconfig_mapping.to_dict() == QConfigMapping().to_dict())
    except AttributeError:
        return False


def _class_name(value: Any) -> str | None:
    if value is type(None) or value is None:
        return None
    if isinstance(value, type):
        return f"{value.__module__}.{value.__qualname__}"
    return str(value)


def pt2e_scopes(model: nn.Module, ir: IR) -> dict[str, list[Any]] | None:
    """``{IR node of an observer call in the root graph: [module path, class name or None]}`` of ``model``'s
    PT2E attributes, or None when ``model`` has none, they are not PT2E's or the calls do not pair."""
    attrs = getattr(model, "meta", {}).get(_ATTRS) if isinstance(model, fx.GraphModule) else None
    if attrs is None or not _pt2e_shaped(attrs) or "root" not in ir:
        return None
    keys = {alias: key for key, impl in ir.items() for alias in (key, *impl.aliases)}  # a shared observer
    calls: dict[str, list[fx.Node]] = {}
    for node in model.graph.nodes:
        if node.op == "call_module":
            calls.setdefault(keys.get(str(node.target), str(node.target)), []).append(node)
    root = ir.root
    if root.variant_count:
        return None
    seen: dict[str, list[str]] = {}
    for name, data in root.graph.nodes(data=True):
        if data.get("type") not in _CALL_KINDS and isinstance(data.get("implementation"), str):
            seen.setdefault(data["implementation"], []).append(name)
    scopes: dict[str, list[Any]] = {}
    for target, nodes in calls.items():
        if target not in seen:
            continue  # a call export inlined (``_guards_fn``), or a module the IR calls under another path
        if len(seen[target]) != len(nodes):
            return None
        for node, ir_node in zip(nodes, seen[target], strict=True):
            observed = node.args[0] if node.args and isinstance(node.args[0], fx.Node) else None
            if observed is None:
                continue
            path, cls = attrs.node_name_to_scope.get(observed.name, ("", type(None)))
            if not isinstance(path, str):
                return None
            scopes[ir_node] = [path, _class_name(cls)]
    return scopes


def record_pt2e_prepared(ir: IR, model: nn.Module) -> None:
    """Set ``ir.root.meta["pt2e_prepared"]`` when ``model`` is a PT2E-prepared model (see the module doc)."""
    scopes = pt2e_scopes(model, ir)
    if scopes is not None:
        ir.root.meta[PT2E_PREPARED_KEY] = {"is_qat": model.meta[_ATTRS].is_qat, "scopes": scopes}


__all__ = ["pt2e_scopes", "record_pt2e_prepared"]

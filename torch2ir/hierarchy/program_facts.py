"""What an exported program records beyond its graph, written into the IR: lifted constants and the tensors to
keep, buffer mutations and parameters written (refused), the root's and each module's calling convention."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import fx, nn

from common.ir import IR, Implementation
from common.state_dict import in_state_dict
from torch2ir.hierarchy.modules import ModuleTable
from torch2ir.hierarchy.recover import Frame, Hierarchy, Problem
from torch2ir.hierarchy.tensormeta import range_bound, state_record
from torch2ir.lowering.flat import spec_text


def shape_of(impl: Implementation) -> list[tuple]:
    """Graph structure with node names replaced by positions (to compare two calls)."""
    index = {n: i for i, n in enumerate(impl.graph.nodes)}
    out = []
    for node, attrs in impl.graph.nodes(data=True):
        out.append((attrs["type"], attrs.get("implementation"), attrs.get("variant", 0), repr(attrs.get("meta")),
                    sorted((index[u], repr(d)) for u, _, d in impl.in_edges(node)),
                    repr(_strip_refs(attrs.get("args"))), repr(_strip_refs(attrs.get("kwargs")))))
    return out


def _strip_refs(value: Any) -> Any:
    from common.values import Ref

    if isinstance(value, Ref):
        return "ref"
    if isinstance(value, (list, tuple)):
        return [_strip_refs(v) for v in value]
    if isinstance(value, dict):
        return {k: _strip_refs(v) for k, v in value.items()}
    return value


def _owner(table: ModuleTable, fqn: str) -> tuple[str | None, str]:
    path, _, attr = fqn.rpartition(".")
    return table.key(path), attr


def record_constants(ir: IR, table: ModuleTable, ep: torch.export.ExportedProgram) -> None:
    for fqn in ep.graph_signature.inputs_to_lifted_tensor_constants.values():
        key, attr = _owner(table, fqn)
        if key is not None and attr not in ir[key].state:
            ir[key].state[attr] = state_record(ep.constants[fqn], "constant")


def _mutations(ep: torch.export.ExportedProgram, hierarchy: Hierarchy, problems: list[Problem]) -> None:
    for target in ep.graph_signature.buffers_to_mutate.values():
        problems.append((target.rpartition(".")[0] or "root", f"forward mutates buffer {target!r} in place",
                         "keep the mutation inside a module with a handler, or trace in eval mode"))
    for target in _parameters_written(ep):
        problems.append((target.rpartition(".")[0] or "root", f"forward writes parameter {target!r} in place "
                         "(a first-call side effect such as RWKV's rescaling of its weights for inference: the "
                         "graph would repeat it at every call)",
                         "call the model once, in the mode you convert it in, before converting"))


def _parameters_written(ep: torch.export.ExportedProgram) -> list[str]:
    """Parameters the exported graph writes in place (under ``torch.no_grad()``, export keeps the in-place op,
    inside the ``wrap_with_set_grad_enabled`` region's subgraph)."""
    written: dict[str, None] = {}

    def walk(graph: fx.Graph, owner: nn.Module, params: dict[str, str]) -> None:
        for node in graph.nodes:
            if node.op != "call_function":
                continue
            schema = getattr(node.target, "_schema", None)
            if schema is not None:
                for i, arg in enumerate(schema.arguments):
                    if arg.alias_info is None or not arg.alias_info.is_write:
                        continue
                    value = node.args[i] if i < len(node.args) else node.kwargs.get(arg.name)
                    if isinstance(value, fx.Node) and value.name in params:
                        written[params[value.name]] = None
                continue
            # a higher-order op: its subgraph's placeholders are the arguments after the subgraph
            for i, arg in enumerate(node.args):
                if isinstance(arg, fx.Node) and arg.op == "get_attr":
                    sub = getattr(owner, str(arg.target), None)
                    if isinstance(sub, fx.GraphModule):
                        operands = node.args[i + 1:]
                        inner = {p.name: params[o.name] for p, o in zip(
                            (n for n in sub.graph.nodes if n.op == "placeholder"), operands, strict=False)
                            if isinstance(o, fx.Node) and o.name in params}
                        if inner:
                            walk(sub.graph, sub, inner)

    walk(ep.graph, ep.graph_module, dict(ep.graph_signature.inputs_to_parameters))
    return list(written)


def calling_convention(root: Implementation, ep: torch.export.ExportedProgram) -> None:
    spec = ep.call_spec
    entry = next((e for e in ep.module_call_graph if e.fqn == ""), None)
    names = list(entry.signature.forward_arg_names) if entry and entry.signature else []
    root.meta.update(
        in_spec=spec_text(spec.in_spec),
        out_spec=spec_text(spec.out_spec),
        forward_arg_names=names,
        torch_version=torch.__version__.split("+")[0],
    )
    if ep.range_constraints:  # symbol -> [min, max] of dynamic dimensions
        root.meta["range_constraints"] = {
            str(sym): [range_bound(r.lower), range_bound(r.upper)] for sym, r in ep.range_constraints.items()
        }


def module_conventions(ir: IR, table: ModuleTable, hierarchy: Hierarchy, frames: list[Frame]) -> None:
    """Each module written with its recorded call signature takes and returns what the original did."""
    for frame in frames:
        sig = hierarchy.signed.get(id(frame))
        key = table.key(frame.path)
        if sig is not None and key is not None and key in ir:
            ir[key].meta.update(in_spec=sig.in_text, out_spec=sig.out_text, forward_arg_names=list(sig.names))
            if sig.parameters is not None:
                ir[key].meta["parameters"] = [list(p) for p in sig.parameters]


def keep_tensors(ir: IR, table: ModuleTable, constants: Mapping[str, Any]) -> None:
    """Values of state that no state dict carries: non-persistent buffers and constants."""
    for key, impl in ir.items():
        prefix = "" if key == "root" else key + "."
        module = table.module_of_key[key]
        for name, rec in impl.state.items():
            if in_state_dict(rec):
                continue
            value = module._buffers.get(name) if rec["kind"] == "buffer" else \
                module._parameters.get(name) if rec["kind"] == "parameter" else constants.get(prefix + name)
            if value is None:
                value = getattr(module, name, None)
            if isinstance(value, torch.Tensor) and not value.is_meta and "tie" not in rec:
                ir.tensors[prefix + name] = value.detach().clone()

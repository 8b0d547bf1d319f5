"""Lowering a conversion that traced alike blocks once (:mod:`torch2ir.trace_once.trace`).

The export of such a conversion holds one traced call per group of alike blocks and, for every other member,
a stand-in: ``empty_strided`` nodes of the traced call's output metadata that read none of the member's inputs.
:func:`plan` records, while the IR is built, how each stand-in is replaced by a copy of the traced call (a
:class:`Copy`: the traced call's nodes, which of its inputs and outputs stand for which of the member's, by node
name); :func:`expanded` makes the program of the model's whole computation from it: every traced node copied in
place of the stand-in, reading the member's own inputs and its own parameters and buffers. The copies' ``source``
links name the member's unexpanded instances (the same node names as the body's), so a lowered trace-once
conversion is the FlatIR a full export gives, up to node names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx

__all__ = ["Copy", "expanded", "module_calls", "plan"]

_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)


@dataclass(frozen=True)
class Copy:
    """How one stood-in call is replaced by the traced call of its group (every value named by its node name).

    Attributes:
        traced, stood_in: module paths of the traced member and of the member stood in for.
        traced_key, stood_in_key: their keys in the IR.
        nodes: the traced call's ``call_function`` nodes, in graph order.
        inputs: the traced call's input node (or a no-op ``.to()`` of one it reads, :func:`_passed_alias`) ->
            the stood-in call's input node.
        outputs: the stood-in call's output node -> the traced call's output node it stands for.
        stand_ins: the stood-in call's nodes (removed once their uses read the copies, unless a size computed
            there is read later on).
        state: the traced call's parameter/buffer placeholders -> the stood-in member's.
    """

    traced: str
    stood_in: str
    traced_key: str
    stood_in_key: str
    nodes: tuple[str, ...]
    inputs: Mapping[str, str]
    outputs: Mapping[str, str]
    stand_ins: tuple[str, ...]
    state: Mapping[str, str]


def module_calls(hierarchy: Any, path: str) -> list[Any]:
    """The frames of the calls of module ``path`` that ``hierarchy`` traced (not a handled leaf's)."""
    return [f for f in hierarchy.frames_by_path.get(path, []) if not f.leaf]


def plan(hierarchy: Any, table: Any, standins: Any) -> tuple[list[Copy], str | None]:
    """The :class:`Copy` of every stood-in call of ``standins`` (a :class:`torch2ir.trace_once.trace.StandIns` whose
    export ``hierarchy`` describes), or ``([], why)`` when one cannot be copied faithfully (the capture then
    refuses to be lowered, naming why)."""
    ep = hierarchy.ep
    sig = ep.graph_signature
    fqn_of = {**sig.inputs_to_parameters, **sig.inputs_to_buffers}
    placeholder_of = {fqn: name for name, fqn in fqn_of.items()}
    members = standins.pairs()
    frames: dict[str, Any] = {}
    for traced, stood_in in members:
        for path in (traced, stood_in):
            calls = module_calls(hierarchy, path)
            if not calls or (path == stood_in and len(calls) != 1):
                return [], f"{path!r} has {len(calls)} traced calls"
            frames[path] = calls[0]
    wanted = {id(f): f for f in frames.values()}
    nodes: dict[int, list[fx.Node]] = {i: [] for i in wanted}
    for node in ep.graph.nodes:
        frame = hierarchy.frame_of.get(node) if node.op == "call_function" else None
        for f in frame.chain() if frame is not None else ():
            if id(f) in nodes:
                nodes[id(f)].append(node)
    copies = []
    for traced, stood_in in members:
        ft, fs = frames[traced], frames[stood_in]
        st, ss = hierarchy.signed.get(id(ft)), hierarchy.signed.get(id(fs))
        if st is None or ss is None or len(st.inputs) != len(ss.inputs) or len(st.outputs) != len(ss.outputs):
            return [], f"the calls of {traced!r} and {stood_in!r} have no matching recorded signature"
        inputs: dict[str, str] = {}
        for a, b in zip(st.inputs, ss.inputs, strict=True):
            if isinstance(a, fx.Node) != isinstance(b, fx.Node) or (not isinstance(a, fx.Node) and a != b):
                return [], f"{stood_in!r} is called with other constants than {traced!r}"
            if isinstance(a, fx.Node) and isinstance(a.meta.get("val"), _SYMBOLIC):
                continue  # a size: equal input keys give both calls the same symbols (and the body reads its own)
            if isinstance(a, fx.Node) and inputs.setdefault(a.name, b.name) != b.name:
                return [], f"{traced!r} reads one value for two arguments {stood_in!r} gets as two"
        body = nodes[id(ft)]
        inside = {n.name for n in body}
        state: dict[str, str] = {}
        for node in body:
            for arg in node.all_input_nodes:
                if arg.name in inside or arg.name in inputs:
                    continue
                passed = _passed_alias(hierarchy, arg, ft, inputs)
                if passed is not None:
                    inputs[arg.name] = passed
                    continue
                fqn = fqn_of.get(arg.name) if arg.op == "placeholder" else None
                if fqn is not None and fqn.startswith(traced + "."):
                    other = placeholder_of.get(stood_in + fqn[len(traced):])
                    if other is None:
                        return [], f"{stood_in!r} has no {fqn[len(traced) + 1:]!r} in the exported program"
                    state[arg.name] = other
                elif not isinstance(arg.meta.get("val"), _SYMBOLIC):
                    return [], f"the traced call of {traced!r} reads {arg.name!r}, which it is not passed"
        stands = [n.name for n in nodes[id(fs)]]
        outputs: dict[str, str] = {}
        for a, b in zip(st.outputs, ss.outputs, strict=True):
            if isinstance(a, fx.Node) != isinstance(b, fx.Node) or (not isinstance(a, fx.Node) and a != b):
                return [], f"{stood_in!r} returns other constants than {traced!r}"
            if isinstance(b, fx.Node) and (b.name not in stands or a.name not in inside
                                           or outputs.setdefault(b.name, a.name) != a.name):
                return [], f"the outputs of {stood_in!r} are not its stand-in's"
        used_outside = [n for n in nodes[id(fs)] if n.name not in outputs and not isinstance(
            n.meta.get("val"), _SYMBOLIC) and any(u.name not in stands for u in n.users)]
        if used_outside:
            return [], f"{used_outside[0].name!r} of the stand-in for {stood_in!r} is read but not an output"
        copies.append(Copy(traced, stood_in, table.key(traced), table.key(stood_in), tuple(n.name for n in body),
                           inputs, outputs, tuple(stands), state))
    return copies, None


def _passed_alias(hierarchy: Any, value: fx.Node, frame: Any, inputs: Mapping[str, str]) -> str | None:
    """What the stood-in call reads for ``value`` when the traced call (``frame``) reads it as the very tensor it
    was passed under another name: a no-op ``.to()`` computed outside the call, which the tracer names later uses
    of the tensor after (transformers 5.24's rotary embedding returns ``cos.to(dtype=x.dtype)`` to every decoder
    layer), while the call's recorded signature names the tensor itself (:meth:`Hierarchy.outer_value`). The
    stood-in reads the same ``.to()`` when it was passed the same tensor (as a full trace reads it), else its own
    input; ``None`` when ``value`` is no such alias of an input."""
    source = hierarchy.outer_value(value, frame)
    if source is value or source.name not in inputs:
        return None
    other = inputs[source.name]
    return value.name if other == source.name else other


def _moved(path: str, traced: str, stood_in: str) -> str | None:
    if path == traced:
        return stood_in
    if path.startswith(traced + "."):
        return stood_in + path[len(traced):]
    return None


def expanded(ep: torch.export.ExportedProgram, copies: list[Copy], links: Mapping[str, tuple]
             ) -> tuple[torch.export.ExportedProgram, dict[str, tuple]]:
    """The program of the model's whole computation: ``ep`` (left unchanged) with every stand-in of ``copies``
    replaced by a copy of its traced call; and ``links`` with the copies' links (to the stood-in member's
    instances)."""
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    out, old_output = graph.graph_copy(ep.graph, env, return_output_node=True)
    for old, new in env.items():  # a fresh graph renames a node named like a builtin (``input`` -> ``input_1``)
        if new.name != old.name:  # the signature names it as export did (export assigns names the same way)
            new.name = old.name
    output = graph.output(out, type_expr=getattr(old_output, "type", None))
    output.meta = dict(old_output.meta)
    by_name = {n.name: n for n in graph.nodes}
    new_links = dict(links)
    renamed: dict[str, str] = {}
    replaced: dict[str, fx.Node] = {}  # a stand-in's output already replaced (the input of a later stand-in)
    order = {n.name: i for i, n in enumerate(graph.nodes)}
    for copy in sorted(copies, key=lambda c: min((order[n] for n in c.stand_ins if n in order), default=len(order))):
        stand_ins = [by_name[n] for n in copy.stand_ins if n in by_name]  # sizes copied in while building: gone
        # a traced call reading a stand-in's output reads its replacement by now (replace_all_uses_with)
        mapping: dict[fx.Node, fx.Node] = {replaced.get(a) or by_name[a]: replaced.get(b) or by_name[b]
                                           for a, b in (*copy.inputs.items(), *copy.state.items())}
        with graph.inserting_before(stand_ins[0] if stand_ins else output):
            for name in copy.nodes:
                node = by_name.get(name)
                if node is None:  # a size computation copied into the frame while the IR was built, removed since
                    continue
                new = graph.node_copy(node, lambda n, m=mapping: m.get(n, n))
                new.meta = dict(node.meta)
                stack = node.meta.get("nn_module_stack")
                if stack:
                    new.meta["nn_module_stack"] = {
                        k: ((_moved(p, copy.traced, copy.stood_in) or p), t) for k, (p, t) in stack.items()}
                mapping[node] = new
                link = links.get(name)
                key = _moved(link[0], copy.traced_key, copy.stood_in_key) if link else None
                if link and key is not None:
                    new_links[new.name] = (key, *link[1:])
        for stand, traced in copy.outputs.items():
            by_name[stand].replace_all_uses_with(mapping[by_name[traced]])
            replaced[stand] = mapping[by_name[traced]]
            renamed[stand] = replaced[stand].name
        for node in reversed(stand_ins):
            if not node.users:  # a size the stand-in computed may be read later on: kept
                graph.erase_node(node)
                new_links.pop(node.name, None)
    sig = ep.graph_signature
    specs = [dataclasses.replace(s, arg=dataclasses.replace(s.arg, name=renamed[s.arg.name]))
             if getattr(s.arg, "name", None) in renamed else s for s in sig.output_specs]
    signature = dataclasses.replace(sig, output_specs=specs)
    program = torch.export.ExportedProgram(
        root=ep.graph_module, graph=graph, graph_signature=signature, state_dict=ep.state_dict,
        range_constraints=ep.range_constraints, module_call_graph=ep.module_call_graph,
        example_inputs=ep.example_inputs, constants=ep.constants, verifiers=list(ep.verifiers))
    return program, new_links

"""``torch.vmap`` inside a forward, carried as the batched operators it computes (issue 49).

``torch.export`` keeps a ``torch.vmap`` call in its graph as the transform's runtime calls, in order:
``_vmap_increment_nesting(size, randomness)`` and ``_add_batch_dim(x, in_dim, level)`` per vmapped dimension, the
function's operators on per-example values, then ``_remove_batch_dim(y, level, size, out_dim)`` and
``_vmap_decrement_nesting()`` per dimension (``torch._functorch.predispatch``). Those calls change the transform's
process-wide nesting level, and a file naming them could leave it unbalanced: the IR does not carry them.
transformers builds every attention mask with a custom mask function this way (``masking_utils.sdpa_mask`` with
``use_vmap=True``; UnlimitedOCR's reference sliding window), so such a model was refused.

:func:`unbatch` replaces each outermost vmap region of an exported graph by what the region computes on whole
tensors: the region's nodes are run once more under ``make_fx``, whose tracer sits below functorch's batching, so
it records the operators the batching rules dispatch (``aten.unsqueeze``, ``aten.expand``, ``aten.le.Tensor``...)
on the region's inputs, with their fake values and symbolic sizes (the export's own fake mode and shape
environment). Nothing is approximated: these are the operators eager mode runs for the same call, and the
rebuild's output is compared with eager mode's by the tests. The new nodes take the module scope and source of the
region's first node.

A region is refused (the graph is left as it is, and the hierarchy's check names the module and the construct)
when its nodes belong to more than one module scope (a vmapped module call: the region would not be one module's
graph), when it is not closed (an increment without its decrement), or when tracing it again fails.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import fx

_FUNCTORCH = "torch._functorch"
_ENTER, _EXIT, _LOAD = "_vmap_increment_nesting", "_vmap_decrement_nesting", "lazy_load_decompositions"
#: Node meta a replacement node copies from the region's first node (where it comes from, which module's it is).
_KEPT_META = ("nn_module_stack", "stack_trace", "source_fn_stack", "from_node", "seq_nr", "torch_fn",
              "custom", "fwd_nn_module_stack", "fwd_source_fn_stack")


def _name(node: fx.Node) -> str | None:
    """The functorch runtime function a node calls (``_vmap_increment_nesting``...), or None."""
    if node.op != "call_function":
        return None
    module = getattr(node.target, "__module__", None) or ""
    return getattr(node.target, "__name__", None) if module.startswith(_FUNCTORCH) else None


def regions(graph: fx.Graph) -> list[list[fx.Node]]:
    """The outermost vmap regions of ``graph``: each the nodes from an outermost ``_vmap_increment_nesting`` to its
    matching ``_vmap_decrement_nesting``, both included, in graph order. An unclosed region is not returned."""
    found: list[list[fx.Node]] = []
    depth, current = 0, []
    for node in graph.nodes:
        name = _name(node)
        if name == _ENTER:
            depth += 1
        if depth:
            current.append(node)
        if name == _EXIT and depth:
            depth -= 1
            if not depth:
                found.append(current)
                current = []
    return found


def _scope(node: fx.Node) -> tuple[str, ...]:
    return tuple((node.meta.get("nn_module_stack") or {}).keys())


def _one_scope(region: list[fx.Node]) -> bool:
    """Whether every node of the region that records a module scope records the same one."""
    scopes = {_scope(n) for n in region if n.meta.get("nn_module_stack") is not None}
    return len(scopes) <= 1


def _interface(region: list[fx.Node]) -> tuple[list[fx.Node], list[fx.Node]]:
    """The values the region reads from outside it, and its values read after it (both in graph order)."""
    inside = set(region)
    inputs: dict[fx.Node, None] = {}
    for node in region:
        for arg in node.all_input_nodes:
            if arg not in inside:
                inputs[arg] = None
    outputs = [n for n in region if any(user not in inside for user in n.users)]
    return list(inputs), outputs


def _value(node: fx.Node, owner: fx.GraphModule) -> Any:
    """An input's value for the retrace: its fake value, or the attribute a ``get_attr`` node names."""
    if node.op == "get_attr":
        value: Any = owner
        for part in str(node.target).split("."):
            value = getattr(value, part)
        return value
    return node.meta.get("val")


def _retraced(region: list[fx.Node], inputs: list[fx.Node], outputs: list[fx.Node],
              owner: fx.GraphModule) -> tuple[fx.GraphModule, list[fx.Node]] | None:
    """The region traced again below functorch's batching: a graph of the operators it dispatches, taking the
    tensor and symbolic inputs as placeholders (other inputs are constants of the region) with those inputs, or
    None when it cannot be."""
    from torch._guards import detect_fake_mode
    from torch.fx.experimental.proxy_tensor import make_fx

    values = {n: _value(n, owner) for n in inputs}
    if any(v is None for n, v in values.items() if n.op != "get_attr"):
        return None
    traced_inputs = [n for n in inputs if isinstance(values[n], (torch.Tensor, torch.SymInt))]
    fake = detect_fake_mode([values[n] for n in traced_inputs])

    def run(*args: Any) -> tuple[Any, ...]:
        env: dict[fx.Node, Any] = dict(values)
        env.update(zip(traced_inputs, args))
        for node in region:
            if node.op == "get_attr":  # a constant of the region (flat_apply's function spec)
                env[node] = _value(node, owner)
                continue
            fn_args = fx.node.map_arg(node.args, env.__getitem__)
            fn_kwargs = fx.node.map_arg(node.kwargs, env.__getitem__)
            env[node] = node.target(*fn_args, **fn_kwargs)
        return tuple(env[n] for n in outputs)

    try:
        if fake is None:
            return make_fx(run, tracing_mode="fake")(*[values[n] for n in traced_inputs]), traced_inputs
        with fake:
            return make_fx(run, tracing_mode="symbolic" if _symbolic(values, traced_inputs) else "fake")(
                *[values[n] for n in traced_inputs]), traced_inputs
    except Exception:  # noqa: BLE001 - a region that does not trace again stays, and is refused by name
        return None


def _symbolic(values: dict[fx.Node, Any], nodes: list[fx.Node]) -> bool:
    for n in nodes:
        v = values[n]
        if isinstance(v, torch.SymInt) or (isinstance(v, torch.Tensor) and any(
                isinstance(s, torch.SymInt) for s in (*v.shape, *v.stride()))):
            return True
    return False


def _splice(graph: fx.Graph, region: list[fx.Node], inputs: list[fx.Node], outputs: list[fx.Node],
            traced: fx.GraphModule, traced_inputs: list[fx.Node], owner: fx.GraphModule) -> dict[str, str]:
    """Insert ``traced``'s nodes before the region, route the region's outside users to them, erase the region;
    the names of the region's outputs and of the nodes now computing them."""
    first = region[0]
    kept = {k: first.meta[k] for k in _KEPT_META if k in first.meta}
    placeholders = [n for n in traced.graph.nodes if n.op == "placeholder"]
    env: dict[fx.Node, Any] = dict(zip(placeholders, traced_inputs))
    results: Any = None
    with graph.inserting_before(first):
        for node in traced.graph.nodes:
            if node.op == "placeholder":
                continue
            if node.op == "output":
                results = fx.node.map_arg(node.args[0], env.__getitem__)
                continue
            if node.op == "get_attr":  # a constant tensor the trace made: a buffer of the owner
                name = _constant_name(owner, str(node.target))
                owner.register_buffer(name, getattr(traced, str(node.target)), persistent=False)
                new = graph.get_attr(name)
            else:
                new = graph.node_copy(node, env.__getitem__)
                new.meta.update(kept)
            if "val" in node.meta:
                new.meta["val"] = node.meta["val"]
            env[node] = new
    renamed: dict[str, str] = {}
    for old, new in zip(outputs, results):
        old.replace_all_uses_with(new, delete_user_cb=lambda user: user not in set(region))
        renamed[old.name] = new.name
    for node in reversed(region):
        graph.erase_node(node)
    for node in inputs:  # the constants only the region read (flat_apply's function specs, at the graph's top)
        if node.op == "get_attr" and not node.users:
            graph.erase_node(node)
    return renamed


def _constant_name(owner: fx.GraphModule, base: str) -> str:
    index = 0
    while hasattr(owner, f"_vmap_{base}_{index}"):
        index += 1
    return f"_vmap_{base}_{index}"


def unbatch(program: torch.export.ExportedProgram) -> int:
    """Replace each outermost vmap region of ``program``'s graph that can be (module docstring) by the operators it
    dispatches; the number replaced. The graph is recompiled, and the program's signatures (which name the graph's
    output values, and those of each preserved module call) name the new nodes, when one was."""
    gm = program.graph_module
    renamed: dict[str, str] = {}
    replaced = 0
    for region in regions(gm.graph):
        if not _one_scope(region):
            continue
        inputs, outputs = _interface(region)
        retraced = _retraced(region, inputs, outputs, gm)
        if retraced is None or any(_name(n) for n in retraced[0].graph.nodes):
            continue
        renamed.update(_splice(gm.graph, region, inputs, outputs, *retraced, gm))
        replaced += 1
    if replaced and not regions(gm.graph):  # vmap's one-time loading of its decompositions: no region needs it
        for node in [n for n in gm.graph.nodes if _name(n) == _LOAD and not n.users]:
            gm.graph.erase_node(node)
    if replaced:
        gm.graph.lint()
        gm.recompile()
        _rename_arguments(program, renamed)
    return replaced


def _rename_arguments(program: torch.export.ExportedProgram, renamed: dict[str, str]) -> None:
    """Point the program's output specs and its module calls' signatures at the nodes that replaced a region's."""
    def rename(argument: Any) -> Any:
        name = getattr(argument, "name", None)
        return dataclasses.replace(argument, name=renamed[name]) if name in renamed else argument

    for spec in program.graph_signature.output_specs:
        spec.arg = rename(spec.arg)
    for entry in program.module_call_graph:
        if entry.signature is not None:
            entry.signature.inputs[:] = [rename(a) for a in entry.signature.inputs]
            entry.signature.outputs[:] = [rename(a) for a in entry.signature.outputs]


__all__ = ["regions", "unbatch"]

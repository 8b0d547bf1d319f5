"""Execute a :class:`~common.flat.FlatIR`: an ``fx.GraphModule`` calling its ops through the allow-list.

One fx node per FlatIR node, in order: ``call_function`` of the op resolved by name through the
allow-list (``torch.ops.aten.*``, listed ``operator``/``torch`` functions), or of the executor
registered for that op name (non-ATen ops, or an ATen op a hardware team wants to replace; scoped
overrides match the node's ``module_path``). Each fx node's ``meta`` carries ``flat_node``,
``op_type`` and ``module_path``, which :func:`common.flat_verify.verify_nodes` reads.

Weights are attached at their state-dict paths (:mod:`ir2torch.flat.state`). Device arguments equal
to the device the FlatIR was traced on (``"meta"``) are taken at run time from the weights (or the
first input), so a graph lowered on ``meta`` runs wherever its weights are. The forward takes the
original ``(*args, **kwargs)`` and returns the original output structure (the recorded pytree specs).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import fx, nn

from common.flat import FlatIR, FlatNode
from common.registry import Registry
from common.safety import Allowlist
from common.values import Ref
from ir2torch.codegen.module_call import report_errors
from ir2torch.codegen.source import calling_convention, install_graph
from ir2torch.flat.state import StateSource, attach_weights, resolve_weights
from ir2torch.guards.same_inputs import insert_flat_same_inputs
from ir2torch.guards.specs import flat_guard
from ir2torch.rebuild.graphs import fx_name, runtime_device
from ir2torch.run_safety.uninitialized import is_uninitialized, zero_filled

Executor = Callable[..., Any]


def new_executor_registry() -> Registry[str, Executor]:
    """An empty registry of executors keyed by op name (``"mylib.op.default"``, ``"aten.gelu.default"``)."""
    return Registry("op type")


def build_flat_module(
    flat: FlatIR,
    state: StateSource = None,
    *,
    device: torch.device | str | None = None,
    strict: bool = True,
    allowlist: Allowlist | None = None,
    executors: Registry[str, Executor] | None = None,
    guard_inputs: bool = True,
) -> fx.GraphModule:
    """An ``nn.Module`` (``fx.GraphModule``) running ``flat`` on real tensors.

    Args:
        flat: the FlatIR.
        state: the original model's state dict, a ``.safetensors`` path (memory-mapped), or the
            original model; keys are ``weight_name_mapping`` values. ``None``: uninitialised weights.
        device: where weights go; ``"meta"`` allocates nothing (given tensors are used as they are).
        strict: require every weight without a value in ``flat.tensors`` to be in ``state``.
        allowlist: resolves op names (default: a fresh default allow-list).
        executors: executors by op name, tried before the allow-list.
        guard_inputs: check every call's inputs against ``graph_inputs``, ``range_constraints`` and
            ``in_spec`` (see :mod:`ir2torch.guards.check`); ``False`` runs any input through the graph unchecked.

    Returns:
        The module, in eval mode; ``forward(*args, **kwargs)`` as the original model's.

    Raises:
        UnsafeTargetError: an op is neither on the allow-list nor has an executor (names the node).
        StateDictError: weights are missing or do not fit (every key listed).
        IRFormatError: the calling convention names an output type no imported library registered.
        InputMismatchError: (when called) an input differs from the recorded ones.
    """
    allow = allowlist if allowlist is not None else Allowlist()
    registry = executors if executors is not None else new_executor_registry()
    flat.validate(allowlist=allow, extra_ops=registry.keys())
    name = str(flat.meta.get("model", "Model")).rpartition(".")[2]
    gm = fx.GraphModule(nn.Module(), fx.Graph(), class_name=fx_name(f"Flat{name}"))
    tensors = resolve_weights(flat, state, device=device, strict=strict)
    attach_weights(gm, flat, tensors)
    fallback = torch.device(device) if device is not None else torch.device("cpu")
    graph = _FlatGraph(flat, allow, registry, fallback).build()
    insert_flat_same_inputs(graph, flat)
    if flat.in_spec is not None:
        graph._codegen = calling_convention({"in_spec": flat.in_spec, "out_spec": flat.out_spec,
                                             "forward_arg_names": flat.forward_arg_names}, "root")
    guard = flat_guard(flat) if guard_inputs else None
    if guard is not None:
        guard.insert(graph)
    report_errors(install_graph(gm, graph, "root"), "root", guard.check_call if guard and guard.arg_names else None)
    if guard is not None:
        guard.attach(gm)
    gm.meta["flat_ir"] = flat
    return gm.eval()


def call_arguments(schema: Any, args: dict[str, Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """Arguments named by schema -> a call: positional in schema order until the first one left out."""
    if schema is None:
        return list(args.values()), dict(kwargs)
    named = {**args, **kwargs}
    positional: list[Any] = []
    keywords: dict[str, Any] = {}
    gap = False
    for arg in schema.arguments:
        if arg.name not in named:
            gap = gap or not arg.kwarg_only
            continue
        if arg.kwarg_only or gap:
            keywords[arg.name] = named[arg.name]
        else:
            positional.append(named[arg.name])
    return positional, keywords


def returns_sequence(schema: Any, outputs: int) -> bool:
    """Whether an op returns a tuple/list (whose items the FlatIR names) rather than one value."""
    if schema is None:
        return outputs > 1
    returns = schema.returns
    return len(returns) != 1 or isinstance(returns[0].type, torch.ListType)


class _FlatGraph:
    """Builds the fx graph of a FlatIR."""

    def __init__(self, flat: FlatIR, allow: Allowlist, executors: Registry[str, Executor],
                 fallback: torch.device) -> None:
        self.flat = flat
        self.allow = allow
        self.executors = executors
        self.fallback = fallback
        self.traced = torch.device(flat.meta["device"]) if isinstance(flat.meta.get("device"), str) else None
        self.graph = fx.Graph()
        self.env: dict[str, Any] = {}  # value name -> fx node, or ("item", fx node, index) until first used
        self.weights = {w.name: flat.weight_name_mapping[w.name] for w in flat.weights}
        self.device: Any = None

    def value(self, name: str) -> fx.Node:
        if name in self.weights and name not in self.env:
            self.env[name] = self.graph.get_attr(self.weights[name])
        found = self.env[name]
        if isinstance(found, tuple):
            _, node, index = found
            found = self.graph.call_function(operator.getitem, (node, index))
            self.env[name] = found
        return found

    def device_node(self) -> Any:
        """The run-time device (an fx node reading a tensor's device), made on first use."""
        if self.device is None:
            # parameters and buffers move with module.to(); a lifted constant (a plain attribute) does not
            ranked = sorted(self.flat.weights, key=lambda w: w.kind == "constant")
            anchor = ranked[0].name if ranked else None
            if anchor is None:
                anchor = next((m.name for m in self.flat.graph_inputs if m.kind == "tensor"), None)
            if anchor is None:
                self.device = self.fallback
            else:
                self.device = self.graph.call_function(runtime_device, (self.value(anchor),))
        return self.device

    def substitute(self, value: Any) -> Any:
        if isinstance(value, Ref):
            return self.value(value.node)
        if isinstance(value, torch.device) and self.traced is not None and value == self.traced:
            return self.device_node()
        if isinstance(value, list):
            return [self.substitute(v) for v in value]
        if isinstance(value, tuple):
            return tuple(self.substitute(v) for v in value)
        if isinstance(value, dict):
            return {k: self.substitute(v) for k, v in value.items()}
        return value

    def target(self, node: FlatNode) -> tuple[Any, Any]:
        """The callable for ``node`` (executor first) and the op's schema, if it has one."""
        op = self.allow.resolve(node.op_type, node=node.name) if self.allow.is_allowed(node.op_type) else None
        schema = getattr(op, "_schema", None)
        if node.op_type in self.executors:
            return self.executors.get(node.op_type, node.module_path), schema
        return (zero_filled(op) if is_uninitialized(op) else op), schema

    def build(self) -> fx.Graph:
        taken: set[str] = set()
        for meta in self.flat.graph_inputs:
            name = base = fx_name(meta.name)
            while name in taken:
                name = f"{base}_{len(taken)}"
            taken.add(name)
            self.env[meta.name] = self.graph.placeholder(name)
            self.env[meta.name].meta["ir_node"] = meta.name
        for node in self.flat.nodes:
            fn, schema = self.target(node)
            args, kwargs = call_arguments(schema, node.args, node.kwargs)
            fx_node = self.graph.create_node("call_function", fn, tuple(self.substitute(args)),
                                             self.substitute(kwargs), name=fx_name(node.name))
            fx_node.meta.update(flat_node=node.name, op_type=node.op_type, module_path=node.module_path,
                                ir_node=node.name)
            if returns_sequence(schema, len(node.outputs)):
                for index, out in enumerate(node.outputs):
                    self.env[out.name] = ("item", fx_node, index)
            elif node.outputs:
                self.env[node.outputs[0].name] = fx_node
        self.graph.output(self.outputs(self.flat.graph_outputs))
        return self.graph

    def outputs(self, metas: Iterable[Any]) -> list[Any]:
        return [m.value if m.kind == "constant" else self.value(m.name) for m in metas]

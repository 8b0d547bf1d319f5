"""Graph-writing helpers shared by the hierarchy builder and the train trace: nodes with their edges,
and the flat graph of a higher-order op's body as a graph-only implementation."""

from __future__ import annotations

import operator
import re
from typing import Any

import torch
from torch import fx

from common.ir import Implementation
from common.names import without_counter
from common.safety import function_name
from common.values import Ref, Subgraph, iter_refs
from torch2ir.hierarchy.tensormeta import value_meta


def add_node_with_edges(impl: Implementation, name: str, ntype: str, implementation: str, args: Any, kwargs: Any,
                        **fields: Any) -> str:
    """Add a node with an args/kwargs template and one edge per :class:`Ref` in it."""
    impl.add_node(name, ntype, implementation, args=list(args), kwargs=dict(kwargs), **fields)
    for path, ref in [*iter_refs(list(args)), *iter_refs(dict(kwargs))]:
        impl.add_edge(ref.node, name, slot=path if len(path) > 1 else path[0], src_index=ref.index)
    return name


#: The function name of ``aten._assert_scalar``, whose message names the node it checks.
ASSERT_SCALAR = "aten._assert_scalar.default"
_ON_NODE = re.compile(r" on node '[^']*'\Z")


_EXPRESSION = re.compile(r"\ARuntime assertion failed for expression (.*) on node '[^']*'\Z", re.DOTALL)


def assert_message(args: Any, cond: Any = None) -> Any:
    """A runtime assertion's arguments, its message naming the IR node it checks instead of export's node.

    Export writes ``Runtime assertion failed for expression u0 >= 0 on node 'ge_18'``, with its own, model-wide
    node name; the IR's name of that value is the node the assertion reads (its first argument). An equation its
    message states the other way round from that node (``cond``, export's node: ``Eq(2, u2 + u3)`` where the node
    computes ``Eq(u2 + u3, 2)``: export writes the equation as it learned it, which a rebuild, stating the node's,
    teaches it the other way) is stated as the node computes it: the same equation, one way for both.
    """
    if len(args) == 2 and isinstance(args[0], Ref) and isinstance(args[1], str):
        message = _ON_NODE.sub(f" on node '{args[0].node}'", args[1])
        return [args[0], _as_computed(message, cond)]
    return args


def _as_computed(message: str, cond: Any) -> str:
    """``message`` with its equation (or inequation) written as ``cond`` computes it, when it states that one
    with the sides swapped; else ``message``."""
    import sympy

    found = _EXPRESSION.match(message)
    val = cond.meta.get("val") if isinstance(cond, fx.Node) else None
    if found is None or not isinstance(val, torch.SymBool):
        return message
    expr = getattr(val.node, "_expr", None)
    if not isinstance(expr, (sympy.Eq, sympy.Ne)):
        return message
    swapped = str(type(expr)(expr.rhs, expr.lhs, evaluate=False))
    if found.group(1) != swapped:
        return message
    return message[:found.start(1)] + str(expr) + message[found.end(1):]


def flat_implementation(gm: fx.GraphModule, name: str) -> Implementation:
    """A flat graph (a higher-order op's body) as a graph-only implementation.

    Its nodes are named from the body's own structure, as a module's graph is (see
    :func:`torch2ir.hierarchy.graph_writer.structural_name`): export's model-wide counter dropped (``ne_3`` ->
    ``ne``) and
    the names numbered again in the body's order, so a rebuilt model converts back to the same body."""
    impl = Implementation(name, "graph")
    env: dict[fx.Node, Ref] = {}
    used: set[str] = {"output"}

    def fresh(exported: str) -> str:
        base = without_counter(exported) or "node"
        name, i = base, 1
        while name in used:
            name, i = f"{base}_{i}", i + 1
        used.add(name)
        return name

    def tmpl(arg: Any) -> Any:
        if isinstance(arg, fx.Node):
            if arg.op == "get_attr":
                return Subgraph(flat_implementation(getattr(gm, arg.target), arg.target))
            return env[arg]
        if isinstance(arg, (list, tuple)):
            items = [tmpl(a) for a in arg]
            return items if isinstance(arg, list) else tuple(items)
        if isinstance(arg, dict):
            return {k: tmpl(v) for k, v in arg.items()}
        return arg

    def add(name: str, ntype: str, target: str, args: Any, kwargs: Any, **fields: Any) -> None:
        add_node_with_edges(impl, name, ntype, target, args, kwargs, **fields)

    tracepoints: dict[fx.Node, tuple] = {}
    for node in gm.graph.nodes:
        if node.target is torch.ops.higher_order._export_tracepoint:
            tracepoints[node] = tuple(node.args)  # signature markers: pass their inputs through
        elif node.target is operator.getitem and node.args[0] in tracepoints:
            env[node] = tmpl(tracepoints[node.args[0]][node.args[1]])
        elif node.op == "placeholder":
            env[node] = Ref(impl.add_node(fresh(node.name), "input", "input", meta=value_meta(node.meta.get("val"))))
        elif node.op == "call_function":
            named, target, args = fresh(node.name), function_name(node.target), tmpl(node.args)
            add(named, "function", target, assert_message(args, node.args[0]) if target == ASSERT_SCALAR else args,
                tmpl(node.kwargs), meta=value_meta(node.meta.get("val")))
            env[node] = Ref(named)
        elif node.op == "output":
            add("output", "output", "output", [tmpl(node.args[0])], {})
    return impl

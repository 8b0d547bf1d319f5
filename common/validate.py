"""Lints of an IR: everything that makes a graph unbuildable, reported with its place.

:func:`validate` checks, per implementation:

- node kinds: a node is ``input``, ``output``, ``function``, ``get_attr`` or a call of an
  implementation the IR holds, of the same type (so no implementation may have one of those
  four kinds as its type: its call nodes could not be told apart from them);
- edges: both ends exist, nothing flows into an ``input`` or out of the ``output``;
- acyclicity of each graph, and of the "calls" relation between implementations;
- function targets against the allow-list of :mod:`common.safety` (no import happens);
- ``get_attr`` targets against the implementation's recorded state;
- names (:mod:`common.validate_names`): every string that names an attribute, an argument or a
  keyword of the rebuilt model follows the rules of :mod:`common.names`, and aliases form a tree;
- provenance (:mod:`common.provenance`): ``meta["provenance"]`` of rewritten implementations;
- arguments: the ``Ref`` placeholders in a node's ``args``/``kwargs`` and its incoming
  edges agree one to one; without ``args``, positional slots leave no gap.

Every failure is an :class:`~common.errors.IRValidationError` subclass naming the
implementation and node and saying what to do.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

import networkx as nx

from common.validate_calls import check_args, check_call

from .bodies import relocate
from .errors import (
    ArgumentMismatchError,
    CycleError,
    DanglingEdgeError,
    IRFormatError,
    IRValidationError,
    MissingImplementationError,
    UnknownNodeKindError,
)
from .expansion import check_expanded
from .ir import CARRIED_NOTES, IR, NODE_KINDS, Implementation
from .none_slots import check_none_slots
from .notes import custom_backward_names
from .op_args import COUNT_HINT, count_problem, enum_problem
from .opaque import OPAQUE_TYPE, OWNED_TYPE, check_data, check_owned, owner_of, traced_alone
from .opaque_reads import reads_record
from .provenance import check_provenance
from .pt2e_prepared import pt2e_prepared_record
from .safety import DEFAULT_ALLOWLIST, Allowlist
from .validate_names import acyclic, check_graph_names, check_names


def _check_children(meta: Mapping[str, Any], key: str) -> None:
    """``meta["children"]`` (the order of a module's children, recorded when an alias sits among them): unique child
    names, as ``nn.Module`` accepts them (no ``.``), at most 10**5."""
    order = meta.get("children")
    if order is None:
        return
    if (not isinstance(order, list) or len(order) > 10**5 or len(set(map(str, order))) != len(order)
            or not all(isinstance(n, str) and n and "." not in n and n.isprintable() and len(n) <= 300 for n in order)):
        raise IRFormatError("meta.children must list the module's child names once each, in order",
                            implementation=key, hint="it orders the children of a module that has an alias among "
                            "them; remove it if the file was edited")


def _check_notes(meta: Mapping[str, Any], key: str, carriers: set[str]) -> None:
    """The notes on the original's train mode and custom Functions (:data:`~common.ir.CARRIED_NOTES`) sit on the
    root, or on a child traced on its own (the notes of its own conversion, which its rebuild carries): elsewhere a
    rebuild would not carry them, so they are refused."""
    custom_backward_names(meta, key, carries=key in carriers)
    held = [name for name in CARRIED_NOTES if name in meta]
    if held and key not in carriers:
        raise IRValidationError(f"meta.{held[0]} belongs to the root implementation or a child traced on its own "
                                "below an opaque leaf", implementation=key, hint="move it to the root's meta")


def validate(ir: IR, *, allowlist: Allowlist | None = None) -> None:
    """Raise the first problem found in ``ir`` (an :class:`IRValidationError` subclass).

    Args:
        ir: the IR to check.
        allowlist: function names to accept (default: :data:`common.safety.DEFAULT_ALLOWLIST`).
    """
    allow = _CheckedNames(allowlist or DEFAULT_ALLOWLIST)
    carriers = {"root", *(traced_alone(ir) if "root" in ir else ())}  # they carry notes of their own conversion
    for key, impl in ir.items():
        if impl.type in NODE_KINDS:
            raise IRValidationError(
                f"implementation type {impl.type!r} is a node kind, so nodes calling it read as {impl.type!r} nodes",
                implementation=key,
                hint=f"give it another type; {', '.join(NODE_KINDS)} are reserved",
            )
        if impl.type == OPAQUE_TYPE:
            check_data(impl.data, key)
        elif impl.type == OWNED_TYPE:
            check_owned(impl.data, key)
            if key == "root" or owner_of(key, ir) is None:
                raise IRValidationError(f"the owned implementation {key!r} has no opaque leaf above it that owns it",
                                        implementation=key, hint="an owned module hangs below an opaque leaf with "
                                        "'owns': true, whose constructor makes it; the file is corrupt or hostile")
        check_provenance(key, impl.meta)
        _check_notes(impl.meta, key, carriers)
        pt2e_prepared_record(impl.meta, key)
        _check_children(impl.meta, key)
        check_none_slots(impl.meta, key)
        reads_record(impl.meta, key)
        for name, rec in impl.state.items():  # a torchao weight: only a linear leaf's, which torchao's F.linear runs
            if "subclass" in rec and (impl.type != "linear" or name != "weight"):
                raise IRValidationError(f"state {name!r} of a {impl.type!r} implementation names subclass "
                                        f"{rec['subclass']!r}", implementation=key, key=f"state[{name!r}].subclass",
                                        hint="only the weight of a 'linear' leaf may be a torchao tensor")
    check_names(ir, subgraphs=False)  # the bodies of higher-order ops: in _check_subgraph, found by the same walk
    calls: dict[str, dict[str, int]] = {}  # caller -> callee -> call nodes naming it, in the order found
    sizes: dict[str, int] = {}  # implementation -> nodes of its largest graph
    checked: set[int] = set()  # shared bodies whose graphs were checked (the rest of an instance is its own)
    for key, impl in ir.items():
        callees = calls.setdefault(key, {})
        body = impl.shared_body
        if body is not None:
            for callee in _validate_instance(ir, impl, body, allow, checked):
                callees[callee] = callees.get(callee, 0) + 1
            sizes[key] = max(len(g._graph._node) for g in body.graphs())
            continue
        for graph in impl.graphs():
            for callee in _validate_graph(ir, graph, allow):
                callees[callee] = callees.get(callee, 0) + 1
        sizes[key] = max(len(g._graph._node) for g in impl.graphs())
    if not acyclic(calls):
        graph = nx.DiGraph()  # the error names the cycle networkx finds first, as it always did
        for key, callees in calls.items():
            graph.add_node(key)
            for callee in callees:
                graph.add_edge(key, callee)
        cycle = [u for u, _ in nx.find_cycle(graph)]
        raise CycleError(
            f"implementations call each other in a cycle: {' -> '.join(cycle + cycle[:1])}",
            implementation=cycle[0],
            hint="a module cannot call itself or one of its callers",
        )
    check_expanded(calls, sizes)


class _CheckedNames:
    """An allow-list's :meth:`~common.safety.Allowlist.check`, asked once per function name in one validation
    (nothing registers operators or changes the allow-list while an IR is validated; a name it refuses is asked
    again each time, for the error naming each node); it also keeps the validation's map of aliases."""

    def __init__(self, allow: Allowlist) -> None:
        self.allow = allow
        self.allowed: set[str] = set()
        self.ops: dict[str, Any] = {}
        #: per validation: alias -> keys of the implementations registered under it (built on first use)
        self.alias_owners: dict[str, list[str]] | None = None

    def owners(self, ir: IR, alias: str) -> list[str]:
        """Keys of the implementations of ``ir`` that list ``alias`` among their aliases (one scan of the IR per
        validation, not one per ``get_attr`` node)."""
        if self.alias_owners is None:
            self.alias_owners = {}
            for key, impl in ir.items():
                for other in impl.aliases:
                    self.alias_owners.setdefault(other, []).append(key)
        return self.alias_owners.get(alias, [])

    def argument_problem(self, name: object, attrs: dict[str, Any]) -> tuple[str, str] | None:
        """What is wrong with the dtype/layout/memory-format or count arguments of a call of allowed ATen op
        ``name``, and what to do."""
        if type(name) is not str or not name.startswith("aten.") or ("args" not in attrs and "kwargs" not in attrs):
            return None
        op = self.ops.get(name)
        if op is None:
            op = self.ops[name] = self.allow.resolve(name)
        args, kwargs = attrs.get("args", []), attrs.get("kwargs", {})
        kwargs = kwargs if isinstance(kwargs, dict) else {}
        problem = enum_problem(op, args, kwargs)
        if problem is not None:
            return problem, ('write the value as {"$dtype": "float32"} (or "$layout", "$memory_format"), '
                             "as torch2ir does")
        problem = count_problem(op, args, kwargs)
        return None if problem is None else (problem, COUNT_HINT)

    def check(self, name: object, *, implementation: str, node: str) -> None:
        """Raise :class:`~common.errors.UnsafeTargetError` unless ``name`` is allowed."""
        if type(name) is str and name in self.allowed:
            return
        self.allow.check(name, implementation=implementation, node=node)
        if type(name) is str:
            self.allowed.add(name)


def _acyclic(g: Any) -> bool:
    """Whether graph ``g`` has no cycle: at once when its stored node order is topological (as written by
    torch2ir), else networkx's check."""
    position = {n: i for i, n in enumerate(g)}
    pred = g._pred  # the adjacency itself: networkx's views cost more than this check
    if all(position[u] < i for i, n in enumerate(g) for u in pred[n]):
        return True
    return nx.is_directed_acyclic_graph(g)


def _validate_graph(ir: Any, impl: Implementation, allow: _CheckedNames, *, context: bool = True) -> list[str]:
    """Check one graph; return the implementations it calls, once per call node. ``context=False``: leave out what
    depends on the IR around it (called modules, state read), for a shared body checked apart from its
    instances."""
    g = impl.graph
    name = impl.name
    callees: list[str] = []
    outputs = []
    for node, attrs in g._node.items():  # ``g.nodes(data=True)`` without the view
        ntype = attrs.get("type")
        if ntype is None:  # created implicitly by networkx for an edge end
            raise DanglingEdgeError(f"an edge names node {node!r}, which has no attributes",
                                    implementation=name, node=node,
                                    hint="add the node with its type, or remove the edges naming it")
        target = attrs.get("implementation")
        if ntype == "output":
            outputs.append(node)
        elif ntype == "function":
            allow.check(target, implementation=name, node=node)
            problem = allow.argument_problem(target, attrs)
            if problem is not None:
                raise ArgumentMismatchError(f"{target}: {problem[0]}", implementation=name, node=node,
                                            hint=problem[1])
        elif ntype == "get_attr":
            if context and not _state_exists(ir, impl, target, allow):
                near = difflib.get_close_matches(str(target), list(impl.state), n=3)
                raise MissingImplementationError(
                    f"get_attr reads {target!r}, which is not in the implementation's state",
                    implementation=name, node=node,
                    hint=f"record it in 'state' (nearest: {', '.join(near)})" if near else "record it in 'state'",
                )
        elif ntype != "input" and context:
            callees.append(check_call(ir, impl, node, ntype, target, attrs))
        for sub in check_args(impl, node, attrs):
            _check_subgraph(ir, sub.impl, allow, name, node)
    if g.number_of_nodes() and len(outputs) != 1:
        raise IRValidationError(
            f"graph has {len(outputs)} output nodes",
            implementation=name,
            node=outputs[1] if outputs else None,
            hint="a graph needs exactly one node of type 'output'",
        )
    node_attrs = g._node  # the adjacency itself, in the order of ``g.edges()``: networkx's views cost more
    for src, targets in g._succ.items():
        for dst in targets:
            if node_attrs[dst].get("type") == "input":
                raise IRValidationError(f"edge from {src!r} flows into input node", implementation=name, node=dst,
                                        hint="input nodes take no edges")
            if node_attrs[src].get("type") == "output":
                raise IRValidationError(f"edge from the output node into {dst!r}", implementation=name, node=src,
                                        hint="nothing may follow the output node")
    if not _acyclic(g):
        cycle = [u for u, *_ in nx.find_cycle(g)]
        raise CycleError(f"graph has a cycle: {' -> '.join(cycle + cycle[:1])}", implementation=name,
                         node=cycle[0], hint="an IR graph must be acyclic; remove one of these edges")
    return callees


def _validate_instance(ir: IR, impl: Implementation, body: Implementation, allow: _CheckedNames,
                       checked: set[int]) -> list[str]:
    """Check an unexpanded instance of a shared body without expanding it: the body's graphs once per validation
    (what they hold is the same in every instance), and per instance what depends on where it sits: the modules
    its calls name (relocated from the body's home to ``impl``) and the state its ``get_attr`` nodes read."""
    home = body.name
    if id(body) not in checked:
        checked.add(id(body))
        for graph in body.graphs():
            check_graph_names(graph, impl.name, subgraphs=False)
            _validate_graph(_Detached(), graph, allow, context=False)
    callees: list[str] = []
    for graph in body.graphs():
        for node, attrs in graph._graph._node.items():
            ntype, target = attrs.get("type"), attrs.get("implementation")
            if ntype == "get_attr":
                if not _state_exists(ir, impl, target, allow):
                    raise MissingImplementationError(
                        f"get_attr reads {target!r}, which is not in the state of this instance of body {home!r}",
                        implementation=impl.name, node=node, hint="record it in 'state'")
            elif ntype not in NODE_KINDS:
                relocated = relocate(target, home, impl.name) if isinstance(target, str) else target
                callees.append(check_call(ir, impl, node, ntype, relocated, attrs))
    return callees


class _Detached:
    """The IR of a body's graph checked on its own: it holds no implementation (calls and state are checked per
    instance by :func:`_validate_instance`)."""


def _state_exists(ir: IR, impl: Implementation, target: Any, allow: _CheckedNames) -> bool:
    """``target`` names a state entry of ``impl`` or (dotted) of an implementation below it (``allow`` holds the
    validation's alias map)."""
    if not isinstance(target, str):
        return False
    if target in impl.state:
        return True
    owner, _, attr = target.rpartition(".")
    key = owner if impl.name == "root" else f"{impl.name}.{owner}"
    if not owner:
        return False
    if key in ir:
        return attr in ir[key].state
    return any(attr in ir[k].state for k in allow.owners(ir, key))  # ``key`` is an alias (it is not a key)


def _check_subgraph(ir: IR, sub: Implementation, allow: _CheckedNames, name: str, node: str) -> None:
    """A higher-order op's body: only inputs, functions and one output; checked recursively."""
    for n, attrs in sub.graph._node.items():
        if attrs.get("type") not in ("input", "output", "function"):
            raise UnknownNodeKindError(
                f"subgraph {sub.name!r} has node {n!r} of type {attrs.get('type')!r}",
                implementation=name, node=node, hint="subgraphs hold input, function and output nodes only",
            )
    check_graph_names(sub, name, subgraphs=False)  # its own bodies: in the _validate_graph below
    _validate_graph(ir, sub, allow)


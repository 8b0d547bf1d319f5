"""Lints of a graph's call nodes: the implementation a call names (it exists, is a child of the caller, is no
cycle), and the arguments a node carries (their slots, the subgraphs of higher-order ops). Part of
:func:`common.validate.validate`."""

from __future__ import annotations

import difflib
from typing import Any

from .errors import (
    ArgumentMismatchError,
    IRValidationError,
    MissingImplementationError,
    NodeTypeMismatchError,
    UnknownNodeKindError,
)
from .functional_modules import method_of
from .ir import IR, NODE_KINDS, Implementation, slot_path
from .values import Ref, Subgraph, collect_refs


def check_call(ir: IR, impl: Implementation, node: str, ntype: str, target: Any, attrs: dict[str, Any]) -> str:
    name = impl.name
    if not isinstance(target, str):
        near = difflib.get_close_matches(ntype, NODE_KINDS, n=1)
        raise UnknownNodeKindError(
            f"node type {ntype!r} is not a node kind and the node names no implementation",
            implementation=name, node=node,
            hint=(f"did you mean {near[0]!r}? " if near else "")
            + f"node kinds are {', '.join(NODE_KINDS)}; a module call needs 'implementation'",
        )
    callee = ir._impls.get(target)
    if callee is None:
        near = difflib.get_close_matches(target, list(ir), n=3)
        kind_near = difflib.get_close_matches(ntype, NODE_KINDS, n=1)
        hint = f"nearest implementation keys: {', '.join(near)}" if near else "add the implementation to the IR"
        if kind_near:
            hint += f" (or did you mean node kind {kind_near[0]!r}?)"
        raise MissingImplementationError(f"node calls implementation {target!r}, which the IR does not hold",
                                         implementation=name, node=node, hint=hint)
    variant = attrs.get("variant", 0)
    if isinstance(variant, bool) or not isinstance(variant, int) or not 0 <= variant <= callee.variant_count:
        raise IRValidationError(
            f"node calls graph variant {variant!r} of {target!r}, which has {callee.variant_count} variants",
            implementation=name, node=node, hint="'variant' is 1..len(variants) of the callee, or absent",
        )
    if callee.type != ntype:
        raise NodeTypeMismatchError(
            f"node has type {ntype!r} but implementation {target!r} has type {callee.type!r}",
            implementation=name, node=node, hint="a call node's type must equal the called implementation's type",
        )
    method_of(attrs, ntype, name, node)  # a FloatFunctional call names its method, no other call does
    return target


def check_args(impl: Implementation, node: str, attrs: dict[str, Any]) -> list[Subgraph]:
    """Check that ``node``'s ``Ref`` placeholders and in-edges agree; return the subgraphs among its arguments
    (args first, then kwargs, in order)."""
    name = impl.name
    edges = impl.in_edges(node)
    if "args" in attrs or "kwargs" in attrs:
        args, kwargs = attrs.get("args", []), attrs.get("kwargs", {})
        if not isinstance(args, (list, tuple)) or not isinstance(kwargs, dict):
            raise ArgumentMismatchError("'args' must be a list and 'kwargs' a dict", implementation=name, node=node)
        found: list[tuple[tuple, Ref]] = []
        subgraphs: list[Subgraph] = []
        collect_refs(args, (), found, subgraphs)
        collect_refs(kwargs, (), found, subgraphs)
        refs = dict(found)
        filled: set[tuple] = set()
        for src, _, data in edges:
            slot = data.get("slot")
            if slot is None:
                raise ArgumentMismatchError(
                    f"edge from {src!r} has no slot, but the node has explicit args",
                    implementation=name, node=node, hint="give the edge the slot of its Ref in args/kwargs",
                )
            path = slot_path(slot)
            ref = refs.get(path)
            if ref is None:
                raise ArgumentMismatchError(
                    f"edge from {src!r} fills slot {list(path)}, which is not a reference in the node's args",
                    implementation=name, node=node,
                    hint=f"put {{'$ref': {src!r}}} at {list(path)} in args/kwargs, or fix the edge's slot",
                )
            if type(ref) is not Ref or (ref.node, ref.index) != (src, data.get("src_index")):  # Ref's own __eq__
                raise ArgumentMismatchError(
                    f"slot {list(path)} refers to {ref.node!r} (index {ref.index}) but its edge comes from "
                    f"{src!r} (index {data.get('src_index')})",
                    implementation=name, node=node, hint="make the Ref and the edge name the same source",
                )
            if path in filled:
                raise ArgumentMismatchError(f"two edges fill slot {list(path)}", implementation=name, node=node)
            filled.add(path)
        missing = [list(p) for p in refs if p not in filled]
        if missing:
            raise ArgumentMismatchError(
                f"argument slots {missing} reference other nodes but no edge fills them",
                implementation=name, node=node, hint="add the edges, or replace the references by values",
            )
        return subgraphs
    positions: set[int] = set()  # a set: 10**5 parallel edges into one node are checked in linear time
    for src, _, data in edges:
        slot = data.get("slot")
        if slot is None:
            continue
        path = slot_path(slot)
        if len(path) > 1:
            raise ArgumentMismatchError(
                f"edge from {src!r} fills nested slot {list(path)}, but the node has no args to hold it",
                implementation=name, node=node, hint="give the node 'args'/'kwargs' with a Ref at that path",
            )
        if isinstance(path[0], int):
            if path[0] in positions:
                raise ArgumentMismatchError(f"two edges fill argument {path[0]}", implementation=name, node=node)
            positions.add(path[0])
    free = len([1 for _, _, d in edges if d.get("slot") is None])
    expected = set(range(len(positions) + free))
    if not positions <= expected:
        raise ArgumentMismatchError(
            f"positional slots {sorted(positions)} leave a gap",
            implementation=name, node=node, hint="positional arguments must be numbered 0, 1, 2, ... without gaps",
        )
    return []

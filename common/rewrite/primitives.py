"""The rewrite primitives: ``replace``, ``remove``, ``insert_after``.

Each takes an IR and its state dict (``None`` when no parameter changes), works on a copy, validates
the result, and returns ``(new_ir, new_state)``: ``ir2torch.convert(new_ir, new_state)`` loads with
``strict=True``. Each failure is a :class:`~common.errors.IRError` subclass naming the node or
implementation (:class:`~common.rewrite.RewriteError`, or a ``StateDictError`` for the state).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch

from common.ir import IR

from .core import Match, NodeRef, RewriteError
from .ops import Split, insert_node, remove_node, replace_key, replace_nodes
from .session import Session
from .state import StateTransform

State = Mapping[str, torch.Tensor] | None
Target = Match | NodeRef | str


def _as_match(ir: IR, target: Match | NodeRef) -> Match:
    if isinstance(target, Match):
        return target
    from .core import callee, graph_of

    return Match((target,), (callee(graph_of(ir, target).node(target.node)),))


def replace(ir: IR, state: State, target: Target, *, type: str, key: str | None = None,
            data: Mapping[str, Any] | None = None, state_fn: StateTransform | None = None,
            meta: Mapping[str, Any] | None = None, split: Split | None = None, record: bool = True,
            pass_name: str = "replace", allow: Iterable[str] | None = None,
            ) -> tuple[IR, dict[str, torch.Tensor] | None]:
    """Replace a node, a matched subgraph, or an implementation by (a call of) a new implementation of ``type``.

    - ``target`` a :class:`Match` (one graph) or a :class:`NodeRef`: the nodes become one call node (named
      after the first) of the new implementation ``key`` (default: the first replaced implementation's key),
      fed by the values entering the match (a single node keeps its arguments as they are); consumers of the
      match's result read the new call. With ``split=(dim, sizes)``, several matched nodes may be used
      outside: the new output is sliced along ``dim``, one piece per matched node (named after it).
    - ``target`` an implementation key: the implementation is replaced and every call of it follows.

    Replaced implementations (and their descendants) go; they must not be called from anywhere else.
    ``data``/``meta``/state default to those of the single implementation replaced (if there is one);
    ``state_fn(original)`` reads tensors of ``state`` by path and returns the new implementation's tensors
    by name (their records follow: kind and flags from a replaced entry of the same name, else a parameter).
    The new implementation's ``meta["provenance"]`` records what it was made from (``record=False``: not).

    Raises:
        RewriteError: the target spans graphs, has several outputs without ``split``, calls a module used
            elsewhere, the key is taken or misplaced, or the result does not validate.
        PatternNotFoundError: the target is not in the IR.
        StateDictError: ``state`` does not fit ``ir``, or ``state_fn`` fails or misses an entry.
    """
    s = Session(ir, state, allow=allow, pass_name=pass_name)
    if isinstance(target, str):
        if split is not None or key not in (None, target):
            raise RewriteError("replacing an implementation by key keeps its key and has one output",
                               implementation=target, hint="drop key= and split=, or replace its call node")
        replace_key(s, target, type=type, data=data, state_fn=state_fn, meta=meta, record=record, pass_name=None)
    else:
        replace_nodes(s, _as_match(s.ir, target), type=type, key=key, data=data, state_fn=state_fn, meta=meta,
                      split=split, record=record, pass_name=None)
    return s.finish()


def remove(ir: IR, state: State, target: NodeRef | Match, *, input: int = 0,
           allow: Iterable[str] | None = None) -> tuple[IR, dict[str, torch.Tensor] | None]:
    """Remove a node; its consumers read its ``input``-th argument instead (``Ref``\\ s and edges together).

    The implementation it called goes too when nothing else calls it (with its state entries).

    Raises:
        RewriteError: the node is an input/output node, has no such input, or a consumer reads an item of
            an item; or the result does not validate.
        PatternNotFoundError: the node is not in the IR.
    """
    s = Session(ir, state, allow=allow, pass_name="remove")
    match = _as_match(s.ir, target)
    if len(match.nodes) != 1:
        raise RewriteError(f"remove takes one node, the match has {len(match.nodes)}",
                           implementation=match.nodes[0].implementation, node=match.nodes[0].node,
                           hint="remove the nodes one at a time")
    remove_node(s, match.nodes[0], input)
    return s.finish()


def insert_after(ir: IR, state: State, target: NodeRef, *, type: str, key: str | None = None,
                 data: Mapping[str, Any] | None = None, state_fn: StateTransform | None = None,
                 meta: Mapping[str, Any] | None = None, node_name: str | None = None, record: bool = True,
                 allow: Iterable[str] | None = None) -> tuple[IR, dict[str, torch.Tensor] | None]:
    """Insert a call of a new implementation of ``type`` right after ``target``: it takes the node's output,
    and every former consumer of the node reads the new call instead (a fake-quantize after a conv).

    ``key`` defaults to ``<graph owner>.<node>_<type>``; the new implementation hangs below the owner of
    the graph (a direct child of a ``Sequential``, placed right after the node's module so the container
    runs it next). ``state_fn`` gives its tensors (see :func:`replace`).

    Raises:
        RewriteError: the node is the output node, the key is taken or misplaced, or the result does not validate.
        PatternNotFoundError: the node is not in the IR.
    """
    s = Session(ir, state, allow=allow, pass_name="insert_after")
    insert_node(s, target, type=type, key=key, data=data, state_fn=state_fn, meta=meta, node_name=node_name,
                record=record, pass_name=None)
    return s.finish()


__all__ = ["insert_after", "remove", "replace"]

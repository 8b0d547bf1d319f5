"""The arguments a module call without a recorded signature has from its start (:mod:`torch2ir.hierarchy.local_sizes`
reads the sizes a call needs from the tensors it has)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import fx

if TYPE_CHECKING:
    from torch2ir.hierarchy.recover import Hierarchy
    from torch2ir.signatures.match import Signature


def unsigned_arguments(h: Hierarchy, signatures: dict[int, Signature]) -> dict[int, dict[fx.Node, None]]:
    """For each non-leaf call without a recorded signature (written with data-flow arguments: its inputs are the
    values it reads from outside), the tensors computed before the call that its ops read, in the order first read:
    they are its arguments from its start, as a recorded call's tensor arguments are (a rebuilt module of such a call
    is one, and its first op may read a size of an argument that only a later op reads as a tensor)."""
    out: dict[int, dict[fx.Node, None]] = {}
    order: dict[fx.Node, int] = {}
    first: dict[int, int] = {}  # frame id -> position of its first op
    for index, node in enumerate(h.ep.graph.nodes):
        order[node] = index
        frame = h.frame_of.get(node)
        if node.op != "call_function" or node in h.dead or frame is None:
            continue
        callers = [f for f in frame.chain() if f.parent is not None and not f.leaf and id(f) not in signatures]
        for caller in callers:
            first.setdefault(id(caller), index)
        for value in node.all_input_nodes:
            if not isinstance(value.meta.get("val"), torch.Tensor):
                continue
            home = h.frame_of.get(value, h.root)
            for caller in callers:
                if caller not in home.chain() and order.get(value, index) < first[id(caller)]:
                    out.setdefault(id(caller), {}).setdefault(value)
    return out


__all__ = ["unsigned_arguments"]

"""How a module call's arguments reach the graph it runs: one value per input node of the callee's graph.

A call node keeps its arguments as ``args``/``kwargs`` templates (``Ref``\\ s and constants). A callee with its call
signature (an ``in_spec``) takes them flattened as pytree leaves, in the order of ``(args, kwargs)``; one with
data-flow arguments takes them in order, positional then keyword. The rebuild, :mod:`common.rewrite.inline` and the
views bind them this one way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["argument_leaves"]


def argument_leaves(args: Sequence[Any], kwargs: Mapping[str, Any], signed: bool) -> list[Any]:
    """The values a call passes, one per input of the callee's graph (``signed``: the callee has an ``in_spec``)."""
    if signed:
        from torch.utils import _pytree as pytree

        return pytree.tree_leaves((tuple(args), dict(kwargs)))
    return [*args, *kwargs.values()]

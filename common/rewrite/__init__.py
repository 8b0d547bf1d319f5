"""Rewrites of an IR that carry the weights along: primitives, built-in passes, provenance.

Free functions over an :class:`~common.ir.IR` (networkx style), each returning ``(new_ir, new_state)``
so that ``ir2torch.convert(new_ir, new_state)`` loads with ``strict=True``:

- :func:`find` chains of node / implementation types (optionally through module boundaries);
- :func:`replace` a node, a matched subgraph or an implementation by a new implementation,
  :func:`remove` a node (consumers read one of its inputs), :func:`insert_after` a node;
- passes: :func:`fold_batchnorm`, :func:`fuse_qkv`, :func:`replace_type`, :func:`remove_types`,
  :func:`insert_after_type`, :func:`reparameterize`;
- :func:`replace_pattern` splices a replacement graph for every match of a pattern function, of one output or a
  tuple of several (fx's ``subgraph_rewriter.replace_pattern`` on the IR);
- :func:`rename_implementation` moves a module to another path;
- :func:`inline` puts the graph a module call runs in the call's place (its caller's graph).

Rewritten implementations record what they were made from in ``meta["provenance"]``
(:mod:`common.provenance`), which :func:`common.verify.verify` (``rewritten=``) and
:func:`common.remap_state_dict` read. See ``docs/extending.md`` for a walk-through.
"""

from .batchnorm import fold_batchnorm
from .core import Match, NodeRef, PatternNotFoundError, RewriteError
from .find import find
from .inline import inline
from .passes import Rewritten, insert_after_type, remove_types, replace_type
from .pattern import MatchFilter, replace_pattern
from .primitives import insert_after, remove, replace
from .qkv import fuse_qkv
from .rename import rename_implementation
from .reparam import reparameterize
from .state import StateView

__all__ = [
    "Match", "MatchFilter", "NodeRef", "PatternNotFoundError", "RewriteError", "Rewritten", "StateView", "find",
    "fold_batchnorm", "fuse_qkv", "inline", "insert_after", "insert_after_type", "remove", "remove_types",
    "rename_implementation", "reparameterize", "replace", "replace_pattern", "replace_type",
]  # fmt: skip

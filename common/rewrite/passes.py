"""Built-in passes made of the primitives: replace every implementation of a type, remove pass-through
nodes (dropout, identity), insert a module after every node of a type."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

import torch

from common.ir import IR, Implementation

from .core import NodeRef, RewriteError, Where, matches_where
from .find import find
from .ops import insert_node, remove_node, replace_key
from .session import Session

#: Module types that compute the identity in eval mode.
DROPOUT_TYPES = ("dropout", "dropout1d", "dropout2d", "dropout3d", "alphadropout", "featurealphadropout")
#: Function nodes that do (a functional dropout keeps its input in eval mode).
DROPOUT_FUNCTIONS = ("aten.dropout.default", "aten.feature_dropout.default", "aten.alpha_dropout.default")
IDENTITY_TYPES = ("identity",)

StateMap = Callable[[Implementation, dict[str, torch.Tensor]], Mapping[str, torch.Tensor]]


class Rewritten(tuple):
    """The result of a pass: unpacks as ``(new_ir, new_state)``; ``changes`` lists what changed, one line each."""

    changes: list[str]
    skipped: list[str]
    #: normalizations ``fold_batchnorm`` never folds (layer, group, EvoNorm, ...), one line each with why
    other_norms: list[str]
    #: module calls inlined for a match to be found (:func:`~common.rewrite.replace_pattern`), one line each
    inlined: list[str]

    def __new__(cls, ir: IR, state: dict[str, torch.Tensor] | None, changes: Iterable[str]) -> Rewritten:
        obj = super().__new__(cls, (ir, state))
        obj.changes = list(changes)
        obj.skipped = []  # places the pass looked at and left alone, with why
        obj.inlined = []
        obj.other_norms = []
        return obj

    @property
    def ir(self) -> IR:
        """The rewritten IR."""
        return self[0]

    @property
    def state(self) -> dict[str, torch.Tensor] | None:
        """Its state dict (``None`` when none was given)."""
        return self[1]

    @property
    def count(self) -> int:
        """How many rewrites the pass made."""
        return len(self.changes)


def _own_state(view: Mapping[str, torch.Tensor], impl: Implementation) -> dict[str, torch.Tensor]:
    prefix = "" if impl.name == "root" else impl.name + "."
    return {n: view[prefix + n] for n in impl.state if prefix + n in view}


def replace_type(ir: IR, state: Mapping[str, torch.Tensor] | None, *, new_type: str, type: str | None = None,
                 where: Where = None, data: Mapping[str, Any] | Callable[[Implementation], Mapping[str, Any]] | None
                 = None, state_map: StateMap | None = None, allow: Iterable[str] | None = None) -> Rewritten:
    """Replace every implementation of ``type`` (and/or whose key matches ``where``) by one of ``new_type``.

    ``data`` is the new attributes (a dict, or ``impl -> dict``; default: the old ones); ``state_map(impl,
    {name: tensor})`` turns one implementation's tensors into the new ones (default: kept as they are).
    Every call of a replaced implementation follows.

    Raises:
        RewriteError: neither ``type`` nor ``where`` is given, or a replacement does not validate.
        StateDictError: ``state`` does not fit, or ``state_map`` fails.
    """
    if type is None and where is None:
        raise RewriteError("replace_type needs type= or where=", hint="say which implementations to replace")
    s = Session(ir, state, allow=allow, pass_name="replace_type")
    chosen = [k for k, impl in ir.items() if k != "root" and (type is None or impl.type == type)
              and matches_where(where, k)]
    for key in chosen:
        if key not in s.ir:  # went with an ancestor replaced before
            continue
        impl = s.ir[key]
        new_data = data(impl) if callable(data) else data
        fn = None if state_map is None else (lambda view, impl=impl: state_map(impl, _own_state(view, impl)))
        replace_key(s, key, type=new_type, data=new_data, state_fn=fn, meta=None, record=True, pass_name=None)
    return Rewritten(*s.finish(), s.changes)


def remove_types(ir: IR, state: Mapping[str, torch.Tensor] | None,
                 types: Collection[str] = DROPOUT_TYPES + DROPOUT_FUNCTIONS + IDENTITY_TYPES, *,
                 where: Where = None, allow: Iterable[str] | None = None) -> Rewritten:
    """Remove every node of ``types`` (module types or function targets; default: dropout and identity),
    its consumers reading its first argument. Modules no longer called go with their state.

    Dropout is the identity only in eval mode: the result computes the eval-mode model.

    Raises:
        RewriteError: a removal does not validate (a consumer reading an item of an item).
    """
    s = Session(ir, state, allow=allow, pass_name="remove")
    for match in find(ir, [set(types)], where=where):
        remove_node(s, match.nodes[0], 0)
    return Rewritten(*s.finish(), s.changes)


def insert_after_type(ir: IR, state: Mapping[str, torch.Tensor] | None, of_type: str | Collection[str], *,
                      type: str, data: Mapping[str, Any] | Callable[[NodeRef], Mapping[str, Any]] | None = None,
                      state_fn: Callable[[Mapping[str, torch.Tensor], NodeRef], Mapping[str, torch.Tensor]] | None
                      = None, where: Where = None, allow: Iterable[str] | None = None) -> Rewritten:
    """Insert a module of ``type`` after every node of ``of_type`` (a fake-quantize after every conv).

    ``data`` (a dict, or ``node -> dict``) gives its attributes; ``state_fn(original, node)`` its tensors,
    reading the input state by path. Each new module is ``<owner>.<node>_<type>``.

    Raises:
        RewriteError: an insertion does not validate.
    """
    s = Session(ir, state, allow=allow, pass_name="insert_after_type")
    for match in find(ir, [of_type], where=where):
        ref = match.nodes[0]
        fn = None if state_fn is None else (lambda view, ref=ref: state_fn(view, ref))
        insert_node(s, ref, type=type, key=None, data=data(ref) if callable(data) else data, state_fn=fn, meta=None,
                    node_name=None, record=True, pass_name=None)
    return Rewritten(*s.finish(), s.changes)


__all__ = ["DROPOUT_FUNCTIONS", "DROPOUT_TYPES", "IDENTITY_TYPES", "Rewritten", "insert_after_type", "remove_types",
           "replace_type"]

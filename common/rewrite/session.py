"""A rewrite in progress: a working copy of the IR, the input state, the tensors made so far.

The primitives (:mod:`common.rewrite.primitives`) and passes run their edits on one session and
call :meth:`Session.finish` once: it validates the result, keeps only the sidecar tensors of
surviving records, and builds the output state dict.
"""

from __future__ import annotations

import copy
from collections import ChainMap
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from common.errors import IRError
from common.ir import IR, Implementation
from common.provenance import PROVENANCE_KEY, original_path, records
from common.safety import Allowlist
from common.validate import validate

from .core import NodeRef, RewriteError, call_sites, is_under, position_after, subtree
from .state import StateTransform, input_state, output_state, records_for, run_transform


class Session:
    """Edits of one rewrite. ``ir`` is a private copy; ``made`` maps full state paths to new tensors."""

    def __init__(self, ir: IR, state: Mapping[str, torch.Tensor] | None, *, allow: Iterable[str] | None = None,
                 pass_name: str = "rewrite") -> None:
        if not isinstance(ir, IR):
            raise TypeError(f"rewrites take an IR, not {type(ir).__name__}")
        self.state = input_state(ir, state)
        self.ir = copy.deepcopy(ir)
        #: the input's capture, kept on the result: its ``lower()`` then says the IR changed and what to do
        #: (a ``StaleCaptureError``; ``NoCaptureError`` only for an IR that never had one)
        self.capture = ir.capture
        self.made: dict[str, torch.Tensor] = {}
        self.allowlist = Allowlist().extended(allow)
        self.pass_name = pass_name
        self.changes: list[str] = []
        #: the state records of modules rebuilt as their torch.nn base class (common.base_class): an edit that
        #: changes them (a folded batch norm's bias on a Conv2d subclass) drops the base, which no longer fits
        self.based = {k: _records(i) for k, i in self.ir.items() if "base" in i.meta}

    # -- reading -------------------------------------------------------------------------------
    def view(self) -> Mapping[str, torch.Tensor]:
        """The state as it stands: tensors made by earlier edits first, then the input state."""
        return ChainMap(self.made, self.state or {})

    def need_state(self, what: str, key: str) -> None:
        """Raise unless a state dict was given (a state transform has nothing to read otherwise).

        Raises:
            RewriteError: no state was given.
        """
        if self.state is None:
            raise RewriteError(f"{what} changes parameters, but no state was given", implementation=key,
                               hint="pass the state dict of the IR (the original model's state_dict())")

    # -- building blocks -----------------------------------------------------------------------
    def removable(self, keys: list[str], calls: set[NodeRef]) -> list[str]:
        """The implementations (with everything below them) that go away with the call nodes ``calls``.

        An implementation in ``keys`` called only from ``calls`` goes; so do its descendants, which must
        not be called from outside the implementations that go.

        Raises:
            RewriteError: an implementation in ``keys`` or below one is also called from elsewhere.
        """
        sites = call_sites(self.ir)
        gone: list[str] = []
        for key in keys:
            other = [ref for ref in sites.get(key, []) if ref not in calls]
            if other:
                raise RewriteError(f"implementation {key!r} is also called from {other[0]}; rewriting one of its "
                                   "calls would change the others", implementation=key,
                                   hint="rewrite every call of a shared module at once (replace by key), or "
                                   "give each call its own module first")
            gone += [k for k in subtree(self.ir, key) if k not in gone]
        for key in gone:
            outside = [ref for ref in sites.get(key, []) if ref not in calls and ref.implementation not in gone]
            if outside:
                raise RewriteError(f"implementation {key!r} is called from {outside[0]}, outside the modules the "
                                   "rewrite removes", implementation=key, hint="rewrite that call first")
        for key, impl in self.ir.items():
            if key in gone:
                continue
            for name, rec in impl.state.items():
                tie = rec.get("tie")
                if isinstance(tie, str) and any(tie.startswith(g + ".") or g == "root" for g in gone):
                    raise RewriteError(f"state {name!r} is tied to {tie!r}, which the rewrite removes",
                                       implementation=key, hint="untie it first")
        return gone

    def provenance(self, replaced: list[str], record: bool, pass_name: str | None,
                   base: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        """The provenance records of an implementation replacing ``replaced``."""
        out = list(base or [])
        for key in replaced:
            out += [copy.deepcopy(r) for r in records(self.ir[key]) if r not in out]
        if record:
            out.append({"pass": pass_name or self.pass_name,
                        "from": [{"key": k, "type": self.ir[k].type, "source": original_path(self.ir[k])}
                                 for k in replaced]})
        return out

    def new_implementation(self, key: str, type: str, data: Mapping[str, Any] | None, meta: Mapping[str, Any],
                           state_fn: StateTransform | None, like: Mapping[str, Mapping[str, Any]],
                           provenance: list[dict[str, Any]]) -> Implementation:
        """An implementation (a leaf: built by the builder of ``type``) with the tensors of ``state_fn``."""
        if not isinstance(type, str) or not type:
            raise RewriteError(f"the new type {type!r} is not a non-empty string", implementation=key)
        tensors: dict[str, torch.Tensor] = {}
        if state_fn is not None:
            self.need_state("the state transform", key)
            tensors = run_transform(state_fn, self.view(), key)
        impl = Implementation(key, type, copy.deepcopy(dict(data or {})), state=records_for(tensors, like, key),
                              meta=copy.deepcopy(dict(meta)))
        if provenance:
            impl.meta[PROVENANCE_KEY] = provenance
        else:
            impl.meta.pop(PROVENANCE_KEY, None)
        prefix = "" if key == "root" else key + "."
        for name, tensor in tensors.items():
            self.made[prefix + name] = tensor
        return impl

    def place(self, impl: Implementation, gone: list[str], at: str | None, owner: str, *, after: bool = False) -> None:
        """Remove the implementations ``gone`` and put ``impl`` where ``at`` is (``after``: right after ``at``
        and everything below it; no ``at``: after ``owner``'s subtree), so containers keep their children's order.

        Raises:
            RewriteError: the key is taken, or not below ``owner``, or not a direct child of a container.
        """
        key = impl.name
        if key in self.ir and key not in gone:
            raise RewriteError(f"the new implementation's key {key!r} is taken", implementation=key,
                               hint="pass another key=")
        if not (is_under(key, owner) and key != owner):
            raise RewriteError(f"the new implementation {key!r} must hang below {owner!r}, whose graph calls it",
                               implementation=key, hint=f"use a key of the form '{owner}.<name>'")
        if self.ir[owner].type in ("sequential", "modulelist", "moduledict") and \
                key.rpartition(".")[0] != ("" if owner == "root" else owner):
            raise RewriteError(f"{owner!r} is a container: its new child must be a direct child",
                               implementation=key, hint=f"use a key of the form '{owner}.<name>'")
        keys = list(self.ir)
        if at is not None and at in keys and not after:
            index = keys.index(at)
        else:
            index = position_after(keys, at if at is not None and at != owner else owner)
        kept = [k for k in keys[:index] if k not in gone] + [key] + [k for k in keys[index:] if k not in gone]
        impls = {k: self.ir[k] for k in keys if k not in gone}
        impls[key] = impl
        tensors = self.ir.tensors
        self.ir = IR([impls[k] for k in kept])
        self.ir.tensors = tensors

    def finish(self) -> tuple[IR, dict[str, torch.Tensor] | None]:
        """Validate the edited IR and build its state dict.

        Raises:
            RewriteError: the result is invalid (naming the implementation and node, with the cause).
            StateDictError: a state entry of the result has no value or does not fit its record.
        """
        for key, before in self.based.items():
            if key in self.ir and _records(self.ir[key]) != before:
                self.ir[key].meta.pop("base", None)
        records_of = {("" if k == "root" else k + ".") + n: r for k, i in self.ir.items() for n, r in i.state.items()}
        self.ir.tensors = {p: t for p, t in self.ir.tensors.items() if p in records_of}
        try:
            validate(self.ir, allowlist=self.allowlist)
        except IRError as exc:
            raise RewriteError(f"the rewrite would make an invalid IR: {exc.message}",
                               implementation=exc.implementation, node=exc.node, key=exc.key, hint=exc.hint) from exc
        self.ir.capture = self.capture
        return self.ir, output_state(self.ir, self.state, self.made)


def _records(impl: Implementation) -> list[tuple[str, str]]:
    """The state records of ``impl`` as comparable text (names, kinds, shapes, dtypes)."""
    return sorted((name, repr(sorted(rec.items(), key=lambda kv: kv[0]))) for name, rec in impl.state.items())


__all__ = ["Session"]

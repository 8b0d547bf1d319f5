"""The module-level IR: one :class:`Implementation` per module instance, each with a graph.

An :class:`IR` maps implementation keys (``"root"`` and the dotted ``named_modules()``
paths) to implementations. An implementation has

- ``name`` and ``type`` (``"linear"``, ``"module"``, ...),
- ``data``: its attributes, e.g. the constructor arguments of a leaf module,
- ``graph``: a :class:`networkx.MultiDiGraph` of nodes (``input``, ``output``, ``function``, ``get_attr`` or a
  call of another implementation) and edges that carry the value of one node into an argument slot of another,
- ``state``: records of its own parameters/buffers/constants (shape, dtype, ...),
- ``aliases``: further paths under which the same module instance is registered,
- ``meta``: structural facts (module class, calling convention, ...).

The plain nested-dict form (:meth:`IR.to_dict` / :meth:`IR.from_dict`) is specified in ``docs/ir-spec.md``.
``str(ir)`` / ``ir.summary()`` print the module tree, ``ir[key].print_readable()`` one graph as code
(:mod:`common.textview`) and ``ir.view("model.html")`` writes an interactive HTML view (:mod:`common.htmlview`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, MutableMapping
from pathlib import Path
from typing import Any

from .capture import IRLowering
from .errors import ImplementationNotFound, IRFormatError
from .implementation import Implementation
from .presenters import presenter
from .schema import (
    DEFAULT_MAX_NODES,
    NODE_KINDS,
    RESERVED_KEYS,
    STATE_KINDS,
    ValueFn,
    _same,
    check_node_budget,
    expect,
    slot_path,
)

__all__ = ["CARRIED_NOTES", "IR", "NODE_KINDS", "NOTES_KEY", "ORIGINAL_CLASS_KEY", "RESERVED_KEYS", "STATE_KINDS",
           "Implementation", "ImplementationNotFound", "parent_key", "slot_path"]

#: Key, in a rebuilt ``fx.GraphModule``'s ``meta``, of the original module's class (``meta["class"]`` of its
#: implementation): a rebuilt module converted again keeps the class it stands for.
ORIGINAL_CLASS_KEY = "torch2ir.class"
#: Key, in a rebuilt root's ``meta``, of the notes of the root implementation that describe the original
#: model's train mode (:data:`CARRIED_NOTES`): the rebuilt model stands for the original, and converting it
#: again records the same notes instead of describing the rebuild's own (deterministic) train mode.
NOTES_KEY = "torch2ir.notes"
CARRIED_NOTES = ("train_trace", "train_buffers", "custom_backward")



class IR(IRLowering, MutableMapping[str, Implementation]):
    """The module-level IR: implementation key -> :class:`Implementation`.

    ``IR.from_dict`` accepts the plain form of ``docs/ir-spec.md`` verbatim; ``to_dict`` returns it. Saving and
    loading go through :mod:`common.serialize` (``ir.save`` / ``IR.load``); ``ir.lower()``: :mod:`common.capture`.
    """

    def __init__(self, implementations: Mapping[str, Implementation] | list[Implementation] | None = None) -> None:
        self._impls: dict[str, Implementation] = {}
        #: tensors no state dict holds (non-persistent buffers, lifted constants) by path; saved as .safetensors
        self.tensors: dict[str, Any] = {}
        items = implementations.values() if isinstance(implementations, Mapping) else (implementations or [])
        for impl in items:
            self._impls[impl.name] = impl

    # -- mapping -------------------------------------------------------------------------
    def __getitem__(self, key: str) -> Implementation:
        try:
            return self._impls[key]
        except (KeyError, TypeError):
            raise ImplementationNotFound(key, list(self._impls)) from None

    def __setitem__(self, key: str, impl: Implementation) -> None:
        if not isinstance(impl, Implementation):
            raise TypeError(f"IR values are Implementation objects, not {type(impl).__name__}")
        if impl.name != key:
            raise IRFormatError(f"implementation named {impl.name!r} stored under key {key!r}",
                                implementation=key, hint="keys and implementation names must agree")
        self._impls[key] = impl

    def __delitem__(self, key: str) -> None:
        try:
            del self._impls[key]
        except KeyError:
            raise ImplementationNotFound(key, list(self._impls)) from None

    def __contains__(self, key: object) -> bool:
        try:
            return key in self._impls
        except TypeError:
            return False

    def __iter__(self) -> Iterator[str]:
        return iter(self._impls)

    def __len__(self) -> int:
        return len(self._impls)

    def add(self, impl: Implementation) -> Implementation:
        """Store ``impl`` under its name and return it."""
        self[impl.name] = impl
        return impl

    @property
    def root(self) -> Implementation:
        """The ``"root"`` implementation."""
        return self["root"]

    # -- plain dict form -----------------------------------------------------------------
    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, value_fn: ValueFn = _same,
                  max_nodes: int | None = DEFAULT_MAX_NODES, bodies: Mapping[str, Any] | None = None) -> IR:
        """Build an IR from its plain nested-dict form (``docs/ir-spec.md``).

        ``bodies``: the shared bodies of a format-2 file (:mod:`common.bodies`), by home key; entries of ``d``
        that name one with ``body`` become unexpanded instances of it.

        Accepts edges keyed by ``(src, dst)`` / ``(src, dst, key)`` tuples or given as a
        list of ``{"src", "dst", ...}`` dicts; nodes as a mapping or a list.

        ``max_nodes``: the document's node budget, all graphs and variants of all implementations together
        (default :data:`~common.schema.DEFAULT_MAX_NODES`; also at most ``4 * max_nodes`` edges and
        ``max_nodes`` implementations); counted before anything is built. ``None`` disables it.

        Raises:
            IRFormatError: the document does not follow the schema, or exceeds the node budget.
            DanglingEdgeError: an edge names a missing node.
        """
        expect(d, Mapping, "document")
        if bodies is not None:
            from .bodies import from_shared

            return from_shared(cls(), d, bodies, value_fn, max_nodes)
        check_node_budget(d, max_nodes)
        ir = cls()
        for key, value in d.items():
            if not isinstance(key, str) or not key:
                raise IRFormatError(f"implementation key {key!r} is not a non-empty string", key="document")
            ir._impls[key] = Implementation.from_dict(key, value, value_fn=value_fn, max_nodes=None)
        return ir

    def shared_bodies(self) -> dict[str, list[str]]:
        """``{home: [instance keys]}`` of the implementations that are alike once their keys are set aside (a
        saved file stores each such group once, see :mod:`common.bodies`), home first, in IR order."""
        from .bodies import group
        from .values import encode

        return group(self.to_dict(value_fn=encode, edge_list=True))

    def to_dict(self, *, value_fn: ValueFn = _same, edge_list: bool = False) -> dict[str, Any]:
        """The plain nested-dict form (``IR.from_dict(ir.to_dict()) == ir``), every instance of a shared body
        written out in full."""
        return {k: impl.to_dict(value_fn=value_fn, edge_list=edge_list) for k, impl in self._impls.items()}

    # -- files and checks ----------------------------------------------------------------
    def save(self, path: Any) -> Any:
        """Write the IR as a versioned, deterministic JSON file (atomically); returns ``path``."""
        from .serialize import save_ir

        return save_ir(self, path)

    @classmethod
    def load(cls, path: Any, *, allow: Any = None, max_nodes: int | None = DEFAULT_MAX_NODES,
             for_viewing: bool = False) -> IR:
        """Read an IR JSON file; refuses unknown versions and unsafe function names.

        ``allow``: operators of other namespaces to accept (``["transformers::grouped_mm_fallback"]``,
        ``"quantized_decomposed::*"``); a file that needs others is refused, listing them.
        ``max_nodes``: the file's node budget (see :meth:`from_dict`; the JSON parser also stops past
        ``JSON_OBJECTS_PER_NODE * max_nodes`` objects); ``None`` disables it, for a trusted file.
        ``for_viewing``: read a calling convention naming an output class no imported library registered (an IR
        of a ``transformers`` model, opened without transformers) as a named placeholder
        (:func:`common.treespec.viewing`) instead of refusing the file; everything else is checked as usual.
        Rebuilding such an IR still needs the real class (``ir2torch.convert`` reads the specs again).
        """
        from .safety import Allowlist
        from .serialize import load_ir
        from .treespec import viewing

        with viewing() if for_viewing else contextlib.nullcontext():
            return load_ir(path, allowlist=Allowlist().extended(allow), max_nodes=max_nodes)

    def validate(self, **kwargs: Any) -> IR:
        """Run :func:`common.validate.validate` on this IR and return it."""
        from .validate import validate

        validate(self, **kwargs)
        return self

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, IR):
            return NotImplemented
        return (
            list(self._impls) == list(other._impls)
            and all(self._impls[k] == other._impls[k] for k in self._impls)
            and self.tensors.keys() == other.tensors.keys()
            and all(_same_tensor(v, other.tensors[k]) for k, v in self.tensors.items())
        )

    def summary(self, depth: int | None = None, *, collapse: bool = True) -> str:
        """The module tree with types and counts after a header of totals (:func:`common.textview.ir_summary`).

        Raises:
            RenderError: ``depth`` is negative.
        """
        return presenter("summary")(self, depth, collapse=collapse)

    def __str__(self) -> str:
        return self.summary()

    def view(self, path: str | os.PathLike, *, overlay: Any = None, overlay_name: str = "overlay",
             compare: IR | None = None, names: tuple[str, str] = ("this IR", "the other")) -> Path:
        """Write this IR's interactive view (one self-contained HTML file, see :mod:`common.htmlview`) to ``path``.

        ``overlay``: ``{module path or "path:node": number}`` (or a JSON file of one, e.g. ``ir2torch verify
        --report``'s) drawn on the tree and the graphs as a colour scale and the value, named ``overlay_name``.
        ``compare``: another IR (the same model rewritten, converted at other input shapes, converted again) shown
        on the right, this one on the left: selecting a module, drawing a graph or picking a node on one side does
        it on the other at its counterpart (a rewritten module's counterpart is the module its provenance names), and
        what was added, removed or changed is marked (:mod:`common.htmlview.compare`); ``names`` label the two.

        Raises:
            IRFormatError: ``overlay`` is not a valid overlay.
            OSError: the file cannot be written.
        """
        return presenter("view")(self, path, overlay, overlay_name, compare=compare, names=names)

    def __repr__(self) -> str:
        return f"IR({len(self)} implementations: {', '.join(list(self._impls)[:5])}{', ...' if len(self) > 5 else ''})"


def parent_key(key: str, keys: Mapping[str, Any] | set[str]) -> str:
    """The implementation under which ``key`` hangs: its longest proper dotted prefix in ``keys``
    (``"root"`` when there is none)."""
    parts = key.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        candidate = ".".join(parts[:cut])
        if candidate in keys:
            return candidate
    return "root"


def _same_tensor(a: Any, b: Any) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and (a.is_meta or b.is_meta or bool((a == b).all()))

"""Children of opaque leaves, traced on their own.

An opaque leaf's forward is not in the trace, so its children are never called in a graph. A child with a handler
(``nn.Linear``) is typed as usual; every other child *directly* below an opaque leaf (through ``nn.ModuleList``,
``nn.ModuleDict`` and ``nn.Sequential`` containers only) is converted on its own: the eager call that records
the opaque leaves' outputs (:func:`torch2ir.opaque.recording.record`) also records the inputs each such child is
called with, and the child is exported alone on them (with the same ``opaque=`` setting: a child whose own trace
fails is made opaque in turn, its children traced alike). Its implementations are then grafted into the model's
IR under its path (:func:`graft`), where they replace the empty entries the model's trace left.

A child so traced is valid for the inputs of its recorded call: the rebuild guards its inputs as it guards a
root's (each tensor's rank, sizes and dtype, each Python constant's value, the call's structure), so a call with
other inputs raises :class:`~common.errors.InputMismatchError` instead of returning something else. A child
called several times with inputs that differ in structure, sizes, dtypes or constants, one never called, or one
whose own conversion is refused stays an opaque leaf itself (its reason in ``ir.capture.opaque``), as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

from common.bodies import is_call
from common.errors import IRError, OperatorSurfaceError
from common.ir import IR, Implementation
from common.notes import CUSTOM_BACKWARD_KEY
from torch2ir.trace_once.trace import output_record

#: Meta entries only a root carries (its trace's torch version). The notes of its train-mode pass
#: (:data:`~common.ir.CARRIED_NOTES`) stay on the child: a child traced on its own carries them into its rebuild, so
#: converting that again (on its own, below the rebuilt opaque leaf) records the original child's notes.
_ROOT_META = ("torch_version",)


def traced_children(modules: Iterable[tuple[str, nn.Module]], has_handler: Callable[[nn.Module], bool],
                    containers: tuple[type, ...], opaque: Callable[[nn.Module], bool]) -> list[tuple[str, nn.Module]]:
    """``(path, module)`` of each module directly below an opaque module of ``modules`` (through containers only)
    that has no handler and is not opaque itself: the children converted on their own."""
    out: list[tuple[str, nn.Module]] = []
    seen: set[int] = set()
    for path, module in modules:
        stack = [(path, module)]
        while stack:
            where, holder = stack.pop()
            for name, child in holder._modules.items():
                if child is None or id(child) in seen:
                    continue
                seen.add(id(child))
                sub = f"{where}.{name}" if where else name
                if type(child) in containers:
                    stack.append((sub, child))
                elif not has_handler(child) and not opaque(child):
                    out.append((sub, child))
    return sorted(out, key=lambda item: item[0])


def copied_inputs(args: tuple, kwargs: Mapping[str, Any]) -> tuple[tuple, dict[str, Any]]:
    """A call's inputs as recorded: tensors detached and cloned (later code may write them in place), the rest
    as they are."""
    def clone(t: torch.Tensor) -> torch.Tensor:
        return t.detach().clone()

    return pytree.tree_map_only(torch.Tensor, clone, (tuple(args), dict(kwargs)))


def alike_calls(calls: list[tuple[tuple, dict[str, Any]]]) -> str | None:
    """Why one graph cannot stand for every recorded call (``None`` when it can): calls differing in structure,
    tensor sizes, strides or dtypes, or constants."""
    if not calls:
        return "it is never called in the eager call"
    first = None
    for call in calls:
        leaves, spec = pytree.tree_flatten(call)
        if len(calls) > 1 and any(not isinstance(x, (torch.Tensor, int, float, bool, str, type(None)))
                                  for x in leaves):
            return "it is called several times with inputs other than tensors and constants"
        key = (spec, [output_record(x) if isinstance(x, torch.Tensor) else ("c", type(x), x) for x in leaves])
        if first is None:
            first = key
        elif key != first:
            return f"it is called {len(calls)} times with inputs of different sizes, dtypes or constants"
    return None


def _target(key: str, path: str) -> str:
    """The key in the model's IR of implementation ``key`` of a child's own IR (``"root"`` is the child)."""
    return path if key == "root" else f"{path}.{key}"


def _renamed(impl: Implementation, path: str) -> Implementation:
    """``impl`` of a child's own IR as an implementation of the model's IR: its key, the modules its graphs call,
    its aliases, ``meta["source"]`` and tied state under ``path``."""
    key = _target(impl.name, path)
    out = Implementation(key, impl.type, impl.data, state={}, aliases=[f"{path}.{a}" for a in impl.aliases],
                         meta={k: v for k, v in impl.meta.items() if k not in _ROOT_META})
    if isinstance(out.meta.get("source"), str):
        out.meta["source"] = _target(out.meta["source"], path)
    for name, rec in impl.state.items():
        rec = dict(rec)
        if isinstance(rec.get("tie"), str):
            rec["tie"] = f"{path}.{rec['tie']}"
        out.state[name] = rec
    graphs = impl.graphs()
    for index, graph in enumerate(graphs):
        target = out if index == 0 else out.add_variant()
        moved = graph.graph.copy()
        for _, attrs in moved.nodes(data=True):
            called = attrs.get("implementation")
            if isinstance(called, str) and is_call(attrs):
                attrs["implementation"] = _target(called, path)
        target.graph = moved
    return out


class GraftError(ValueError):
    """A child's own IR does not have the model's modules below the child's path (a module shared across the
    boundary): the child stays opaque."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path


def graft(ir: IR, path: str, sub: IR) -> None:
    """Replace the implementations of ``ir`` at and below ``path`` by those of ``sub`` (the IR of the module at
    ``path`` converted on its own), its tensors and its root's notes moved along: the child keeps them as they are
    (its rebuild carries them, :mod:`ir2torch.rebuild.graphs`), and ``ir``'s root lists them under ``path``.

    Raises:
        GraftError: ``sub`` does not have the same modules as ``ir`` below ``path`` (a module shared across the
            boundary): the caller keeps the child opaque.
    """
    prefix = path + "."
    mine = {k for k in ir if k == path or k.startswith(prefix)}
    theirs = {_target(k, path) for k in sub}
    if mine != theirs:
        raise GraftError(path, f"the modules below {path} differ between the model and the child: "
                               f"{sorted(mine ^ theirs)[:3]}")
    for key in sorted(mine):  # a module below path also held elsewhere (brevitas shares quantizer parts)
        outside = [a for a in ir[key].aliases if not (a == path or a.startswith(prefix))]
        if outside:
            raise GraftError(path, f"{key} is also held at {outside[0]}, outside {path}")
    notes = sub.root.meta
    renamed = {_target(k, path): _renamed(impl, path) for k, impl in sub.items()}
    order = list(ir)  # kept: a rebuild attaches children (a ModuleList's items) in the IR's order
    for key in order:
        impl = renamed.get(key) or ir[key]
        del ir[key]
        ir.add(impl)
    for name in [n for n in ir.tensors if n.startswith(prefix)]:
        del ir.tensors[name]
    for name, tensor in sub.tensors.items():
        ir.tensors[f"{path}.{name}"] = tensor
    root = ir.root.meta
    if notes.get(CUSTOM_BACKWARD_KEY):
        root[CUSTOM_BACKWARD_KEY] = sorted({*root.get(CUSTOM_BACKWARD_KEY, []), *notes[CUSTOM_BACKWARD_KEY]})
    # a rebuilt model's root carries the original's notes, the children's included (converting it again grafts
    # the same children): each is added once
    buffers = notes.get("train_buffers")
    if isinstance(buffers, list) and buffers:
        kept = root.get("train_buffers") if isinstance(root.get("train_buffers"), list) else []
        root["train_buffers"] = [*kept, *(b for b in (f"{path}.{b}" for b in buffers) if b not in kept)]
    for name in ("train_trace", "train_buffers"):
        note = notes.get(name)
        if isinstance(note, str) and note != "applied":
            kept = root.get(name) if isinstance(root.get(name), str) else ""
            entry = f"{path}: {note}"
            if not (kept == entry or kept.startswith(f"{entry}; ") or f"; {entry}; " in kept
                    or kept.endswith(f"; {entry}")):
                root[name] = "; ".join(x for x in (kept, entry) if x)


def convert_children(convert: Callable[[nn.Module, tuple, dict[str, Any]], IR],
                     children: list[tuple[str, nn.Module]],
                     calls: Mapping[str, list[tuple[tuple, dict[str, Any]]]]) -> tuple[dict[str, IR], dict[str, str]]:
    """Convert each child on its first recorded call: ``({path: its IR}, {path: why it stays opaque})``."""
    done: dict[str, IR] = {}
    kept: dict[str, str] = {}
    for path, child in children:
        why = alike_calls(list(calls.get(path, [])))
        if why is None:
            args, kwargs = calls[path][0]
            try:
                done[path] = convert(child, args, kwargs)
            except IRError as exc:
                if _surface_refusal(exc):  # an operator to opt in to (allow=): said as it is, never made opaque
                    raise
                why = f"its own conversion was refused: {exc.message.splitlines()[0][:160]}"
        if why is not None:
            kept[path] = why
    return done, kept


def _surface_refusal(exc: BaseException | None) -> bool:
    """Whether ``exc`` is, or was caused by, an :class:`~common.errors.OperatorSurfaceError`."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, OperatorSurfaceError):
            return True
        seen.add(id(exc))
        exc = exc.__cause__
    return False


__all__ = ["GraftError", "alike_calls", "convert_children", "copied_inputs", "graft", "traced_children"]

"""Conversion with opaque leaves (``torch2ir.convert(..., opaque=...)``): which classes are kept opaque, and the
export loop of ``opaque="auto"``, which adds the class of each module whose trace fails, and of the caller of an
opaque leaf that passes it a value read from data, until the export succeeds.

``build`` is :mod:`torch2ir.build`'s IR builder, passed in (this package sits below it).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from torch import nn

from common.ir import IR

from ..frontend import ExportFailedError, OpaqueCallError
from ..modules import CONTAINER_TYPES
from .attribution import qualified_name
from .children import GraftError, convert_children, graft, traced_children
from .leaves import (
    OpaqueConverter,
    inner_modules,
    keep_tensor_attributes,
    opaque_classes_of,
    opaque_data,
    opaque_modules,
)
from .recording import record

#: ``opaque="auto"`` makes at most this many classes opaque before giving up.
MAX_OPAQUE_CLASSES = 16


def with_opaque(build: Callable[..., IR], converter: Any, model: nn.Module, args: tuple,
                kwargs: Mapping[str, Any] | None, opaque: str | Collection[type | str],
                known: Mapping[type, str] | None = None, **options: Any) -> IR:
    """:func:`build_ir` with opaque leaves: the classes named in ``opaque``, and with ``"auto"`` the class of each
    smallest module whose trace fails (the root's own, when its own code fails), added one at a time while the
    export fails on such a module. ``known``: classes already found opaque (for a child converted on its own)."""
    auto = opaque == "auto"
    why: dict[type, str] = dict(known or {}) if auto else {cls: "named in opaque="
                                                            for cls in opaque_classes_of(model, opaque)}
    while True:
        try:
            return _build_opaque(build, converter, model, args, kwargs, why, opaque, **options)
        except OpaqueCallError as exc:
            # a caller passes an opaque leaf a value computed from tensor data: its caller is kept opaque instead
            # (up the tree, while the calls of the opaque leaves cannot be kept)
            parents = {type(_caller(model, p)) for p in exc.leaves if p}  # the root included
            new = [cls for cls in parents if cls not in why]
            if not auto or not new or len(why) + len(new) > MAX_OPAQUE_CLASSES:
                raise
            for cls in new:
                why[cls] = f"it passes an opaque leaf a value computed from tensor data ({exc.message[:120]})"
        except ExportFailedError as exc:
            failure = getattr(exc, "failure", None)
            module = model if failure is not None and not failure.path else getattr(failure, "module", None)
            reason = getattr(failure, "why", "")
            path = failure.path if failure is not None else ""
            if module is not None and type(module) in why and path:
                # already opaque, so its code ran through another method than forward (Mimi's codebook.encode):
                # the nearest caller above it that is not opaque yet is kept opaque instead
                reason = f"it calls a method of the opaque leaf {path} whose trace fails ({reason[:120]})"
                while type(module) in why and path:
                    module, path = _caller_path(model, path)
            if module is not None and path and converter.has_handler(module):
                # a typed leaf (nn.Linear) is never made opaque: the failure is its caller's use of it (Switch
                # Transformers' router moves its classifier to another dtype inside forward)
                reason = f"its use of {path} ({type(module).__name__}) fails to trace ({reason[:120]})"
                while path and (type(module) in why or converter.has_handler(module)):
                    module, path = _caller_path(model, path)
            if (not auto or failure is None or module is None or type(module) in why
                    or len(why) >= MAX_OPAQUE_CLASSES):
                raise
            why[type(module)] = reason


def _caller(model: nn.Module, path: str) -> nn.Module:
    """The nearest module above ``path`` that can call it (a ``ModuleList`` or ``ModuleDict`` holds, never calls)."""
    return _caller_path(model, path)[0]


def _caller_path(model: nn.Module, path: str) -> tuple[nn.Module, str]:
    """:func:`_caller` and its path (``""``: the root)."""
    while "." in path:
        path = path.rpartition(".")[0]
        module = model.get_submodule(path)
        if not isinstance(module, (nn.ModuleList, nn.ModuleDict)):
            return module, path
    return model, ""


def _inside(path: str, children: list[tuple[str, nn.Module]]) -> bool:
    return any(path.startswith(f"{child}.") for child, _ in children)


def _build_opaque(build: Callable[..., IR], converter: Any, model: nn.Module, args: tuple,
                  kwargs: Mapping[str, Any] | None, why: dict[type, str], opaque: str | Collection[type | str],
                  **options: Any) -> IR:
    options.pop("trace_once", None)  # every block is traced (a stood-in block's stand-ins would hold the leaves')
    if not why:
        return build(converter, model, args, kwargs, **options)
    modules = opaque_modules(model, why)
    # children of opaque leaves traced on their own; one the opaque code uses besides calling it is opaque too
    # (its own children traced in turn): found by one eager call each round, down the tree
    kept: dict[str, str] = {}
    held: list[tuple[str, nn.Module]] = []
    while True:
        opaque_ids = {id(m) for _, m in held}

        def below(opaque: list[tuple[str, nn.Module]], ids: set[int] = opaque_ids) -> list[tuple[str, nn.Module]]:
            return traced_children(opaque, converter.has_handler, tuple(CONTAINER_TYPES),
                                   lambda module: type(module) in why or id(module) in ids)

        children = below([*modules, *held])
        # an opaque module inside a child traced on its own is that child's conversion's
        modules = [(p, m) for p, m in modules if not _inside(p, children)]
        held = [(p, m) for p, m in held if not _inside(p, children)]
        children = below([*modules, *held])
        standins = record(model, args, kwargs, modules, inputs_of=[p for p, _ in children],
                          keeps_class=lambda m: type(m) in CONTAINER_TYPES or converter.has_handler(m))
        used = [(p, m) for p, m in children if p in standins.uses]
        if not used:
            break
        for path, _ in used:
            kept[path] = f"inside an opaque leaf, which {standins.uses[path].removeprefix('the opaque leaf')}"
        held += used

    def convert(child: nn.Module, child_args: tuple, child_kwargs: dict[str, Any]) -> IR:
        present = {type(m) for m in child.modules()}
        return with_opaque(build, converter, child, child_args, child_kwargs, opaque,
                           known={cls: reason for cls, reason in why.items() if cls in present}, **options)

    done, refused = convert_children(convert, children, standins.inputs)
    kept.update(refused)
    while True:
        inner = inner_modules(modules, converter, CONTAINER_TYPES, traced=done)
        for path, module in [*modules, *inner]:
            opaque_data(module, path)  # refuses an attribute the IR cannot record, before anything is traced
        ir = build(OpaqueConverter(converter, why, [m for _, m in inner]), model, args, kwargs,
                   opaque_standins=standins, **options)
        try:
            for path, sub in done.items():
                graft(ir, path, sub)
            break
        except GraftError as exc:  # a module shared across a child's boundary: that child stays opaque
            kept[exc.path] = f"it cannot be traced on its own: {exc}"
            del done[exc.path]
    keep_tensor_attributes(ir, [*modules, *inner])
    if getattr(ir, "capture", None) is not None:
        if modules and not modules[0][0]:  # the root itself: no export ran
            ir.capture.refused = ("the model's own forward is an opaque leaf (torch.export could not trace it), so no "
                                  "trace of the whole model exists; its children were traced on their own")
        ir.capture.opaque = [*((path, qualified_name(m), why[type(m)]) for path, m in modules),
                             *((path, qualified_name(m),
                               kept.get(path) or why.get(type(m)) or "inside an opaque leaf, without a handler")
                               for path, m in inner),
                             *((f"{path}.{p}" if p else path, cls, reason) for path, sub in done.items()
                               for p, cls, reason in getattr(getattr(sub, "capture", None), "opaque", None) or [])]
    return ir


__all__ = ["MAX_OPAQUE_CLASSES", "with_opaque"]

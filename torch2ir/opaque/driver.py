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
from .leaves import OpaqueConverter, inner_modules, opaque_classes_of, opaque_data, opaque_modules, record

#: ``opaque="auto"`` makes at most this many classes opaque before giving up.
MAX_OPAQUE_CLASSES = 16


def with_opaque(build: Callable[..., IR], converter: Any, model: nn.Module, args: tuple,
                kwargs: Mapping[str, Any] | None, opaque: str | Collection[type | str], **options: Any) -> IR:
    """:func:`build_ir` with opaque leaves: the classes named in ``opaque``, and with ``"auto"`` the class of each
    smallest module whose trace fails, added one at a time while the export fails on such a module."""
    auto = opaque == "auto"
    why: dict[type, str] = {} if auto else {cls: "named in opaque=" for cls in opaque_classes_of(model, opaque)}
    while True:
        try:
            return _build_opaque(build, converter, model, args, kwargs, why, **options)
        except OpaqueCallError as exc:
            # a caller passes an opaque leaf a value computed from tensor data: its caller is kept opaque instead
            # (up the tree, while the calls of the opaque leaves cannot be kept)
            parents = {type(_caller(model, p)) for p in exc.leaves if "." in p}
            new = [cls for cls in parents if cls not in why]
            if not auto or not new or len(why) + len(new) > MAX_OPAQUE_CLASSES:
                raise
            for cls in new:
                why[cls] = f"it passes an opaque leaf a value computed from tensor data ({exc.message[:120]})"
        except ExportFailedError as exc:
            failure = getattr(exc, "failure", None)
            if (not auto or failure is None or not failure.path or type(failure.module) in why
                    or len(why) >= MAX_OPAQUE_CLASSES):
                raise
            why[type(failure.module)] = failure.why


def _caller(model: nn.Module, path: str) -> nn.Module:
    """The nearest module above ``path`` that can call it (a ``ModuleList`` or ``ModuleDict`` holds, never calls)."""
    while "." in path:
        path = path.rpartition(".")[0]
        module = model.get_submodule(path)
        if not isinstance(module, (nn.ModuleList, nn.ModuleDict)):
            return module
    return model


def _build_opaque(build: Callable[..., IR], converter: Any, model: nn.Module, args: tuple,
                  kwargs: Mapping[str, Any] | None, why: dict[type, str], **options: Any) -> IR:
    if not why:
        return build(converter, model, args, kwargs, **options)
    modules = opaque_modules(model, why)
    inner = inner_modules(modules, converter, CONTAINER_TYPES)
    for path, module in [*modules, *inner]:
        opaque_data(module, path)  # refuses an attribute the IR cannot record, before anything is traced
    standins = record(model, args, kwargs, modules)
    options.pop("trace_once", None)  # every block is traced (a stood-in block's stand-ins would hold the leaves')
    ir = build(OpaqueConverter(converter, why, [m for _, m in inner]), model, args, kwargs,
                   opaque_standins=standins, **options)
    if getattr(ir, "capture", None) is not None:
        ir.capture.opaque = [*((path, qualified_name(m), why[type(m)]) for path, m in modules),
                             *((path, qualified_name(m), "inside an opaque leaf, without a handler")
                               for path, m in inner)]
    return ir


__all__ = ["MAX_OPAQUE_CLASSES", "with_opaque"]

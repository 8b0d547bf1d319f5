"""Record the ``torch.nn`` base class of a module traced as a graph (:mod:`common.base_class`)."""

from __future__ import annotations

from typing import Any

from torch import nn
from torch.nn.utils import parametrize

from common.values import encode


def _torch_nn(cls: type) -> bool:
    return cls.__module__.startswith("torch.nn.") and not cls.__module__.startswith("torch.nn.utils")


def base_of(converter: Any, module: nn.Module) -> dict[str, Any] | None:
    """``{"type", "data"}`` of the nearest ``torch.nn`` class above ``type(module)`` that has a handler (or is
    ``nn.Sequential``), or None: ``module`` is not such a subclass, or the base's handler cannot read it."""
    if parametrize.is_parametrized(module):
        return None  # torch's ParametrizedLinear & co.: the base's weight is a parametrization's result
    types = converter.types()
    for cls in type(module).__mro__:
        if cls is nn.Module:
            return None
        if cls is nn.Sequential:
            return {"type": "sequential", "data": {}}
        if cls is type(module) or not _torch_nn(cls) or cls not in types:
            continue
        try:
            data = converter.handlers.get(cls)(module)
            encode(data, "base")
        except Exception:  # noqa: BLE001 - the base's handler does not fit this subclass: no base recorded
            return None
        return {"type": types[cls], "data": data}
    return None





def record_bases(ir: Any, table: Any) -> None:
    """``meta["base"]`` of every module traced as a graph (type ``"module"``) whose class subclasses a handled
    ``torch.nn`` class, or is an ``nn.Sequential`` that could not be made a real one (called with several shapes,
    its graph more than a chain of its children). Runs after ``nn.Sequential``\\ s that chain their children were
    typed ``"sequential"``."""
    for key, impl in ir.items():
        module = table.module_of_key.get(key)
        if impl.type != "module" or module is None or "base" in impl.meta:
            continue
        base = base_of(table.converter, module)
        if base is not None:
            impl.meta["base"] = base
__all__ = ["base_of", "record_bases"]

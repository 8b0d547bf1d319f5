"""Rebuild a module traced as a graph as an instance of the ``torch.nn`` class it subclasses (:mod:`common.base_class`).

The module keeps its generated forward; its class becomes a subclass of both the class fx made for it and the base
(``isinstance(m, nn.Linear)``), and it gets the base's attributes (``in_features``...), taken from a base instance
its type's builder makes on ``meta`` from the recorded arguments. The base's parameters and buffers must be among
the module's own, of the same shapes and dtypes (a base's ``None`` parameter, Linear's ``bias=False``, is set as
``None`` where the module has none): else the file is refused. Deep copies keep the base.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import torch
from torch import fx, nn

from common.base_class import BASE_KEY, base_record
from common.errors import IRError, IRFormatError
from common.ir import IR, Implementation
from common.opaque import OPAQUE_TYPE, OWNED_TYPE
from ir2torch.rebuild.device import building_on

_NOT_BASES = frozenset({OPAQUE_TYPE, OWNED_TYPE, "module", "modulelist", "moduledict"})


def _rebased(module: fx.GraphModule, base: type, attributes: Mapping[str, Any]) -> None:
    """Make ``module`` an instance of ``base`` too, with ``attributes`` set where it has none of that name."""
    fx_class = type(module)

    def deepcopy(self: fx.GraphModule, memo: dict) -> fx.GraphModule:
        """fx's deep copy, then the base again."""
        rebased = type(self)
        self.__class__ = fx_class  # fx's copy runs GraphModule.__init__, whose super() would reach the base's
        try:
            res = fx_class.__deepcopy__(self, memo)
        finally:
            self.__class__ = rebased
        _rebased(res, base, {k: copy.deepcopy(v, memo) for k, v in attributes.items()})
        return res

    module.__class__ = type(fx_class.__name__, (fx_class, base),
                            {"__deepcopy__": deepcopy, "__module__": fx_class.__module__})
    for name, value in attributes.items():
        if name not in module.__dict__:
            module.__dict__[name] = value


def _fits(module: nn.Module, base: nn.Module, key: str) -> None:
    for kind, mine, theirs in (("parameter", module._parameters, base._parameters),
                               ("buffer", module._buffers, base._buffers)):
        for name, tensor in theirs.items():
            own = mine.get(name)
            if tensor is None and own is None:
                continue
            if tensor is None or own is None or tuple(own.shape) != tuple(tensor.shape) or own.dtype != tensor.dtype:
                raise IRFormatError(f"meta.{BASE_KEY}: the {kind} {name!r} of the base {type(base).__name__} does not "
                                    "fit the module's state", implementation=key, key=name,
                                    hint="the base's arguments must describe the module's own parameters and buffers")


def apply_bases(ir: IR, modules: Mapping[str, nn.Module], builders: Any) -> None:
    """Give every module rebuilt from its graph whose implementation records ``meta["base"]`` that base class.

    Raises:
        IRFormatError: a malformed record, a base that is no ``torch.nn`` class, or one whose state does not fit.
    """
    allowed = frozenset(t for t in builders if t not in _NOT_BASES)
    for key, impl in ir.items():
        if BASE_KEY not in impl.meta:
            continue
        record = base_record(impl.meta, key, allowed)
        module = modules.get(key)
        if record is None or not isinstance(module, fx.GraphModule):
            continue  # built by a builder or an override: the class it chose stands
        try:
            with building_on("meta"):
                base = builders.get(record["type"], key).build(Implementation(key, record["type"], record["data"]))
        except IRError:
            raise
        except Exception as exc:
            raise IRFormatError(f"meta.{BASE_KEY}: the builder of {record['type']!r} failed: {type(exc).__name__}: "
                                f"{str(exc)[:200]}", implementation=key, hint="the arguments do not fit the type") \
                from exc
        cls = type(base)
        if not (isinstance(base, nn.Module) and cls.__module__.startswith("torch.nn.")):
            raise IRFormatError(f"meta.{BASE_KEY}: {record['type']!r} is built as {cls.__qualname__}, not a torch.nn "
                                "class", implementation=key, hint="a base is a class of torch.nn")
        _fits(module, base, key)
        for kind, table in (("parameter", base._parameters), ("buffer", base._buffers)):
            for name, tensor in table.items():
                if tensor is None and name not in getattr(module, f"_{kind}s"):
                    (module.register_parameter if kind == "parameter" else module.register_buffer)(name, None)
        attributes = {k: v for k, v in vars(base).items() if k != "training" and not isinstance(v, torch.Tensor)}
        _rebased(module, cls, attributes)


__all__ = ["apply_bases"]

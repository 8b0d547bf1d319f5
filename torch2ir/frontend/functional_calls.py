"""Calls of ``FloatFunctional``-like modules made visible to the trace (see :mod:`common.functional_modules`).

Such a module computes in its methods (``self.skip_add.add(x, y)``); its ``forward`` raises. A method call is no
module call, so a trace would inline its ops into the caller's graph, and a rebuilt model would lose the module
``torch.ao.nn.quantized``'s ``convert`` swaps for its int8 version. While a model converts, each such handled
leaf gets, as instance attributes, methods that run the real method as a call of the module (its ``forward``
set to the method for that call): the trace records a module call whose arguments are the method's, and the
name of the method is recorded per module, for the call nodes (``method``). Everything is put back after.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import Any

from torch import nn

from common.functional_modules import METHODS, TYPES
from torch2ir.hierarchy.recover import Problem
from torch2ir.quant.int8 import QFUNCTIONAL_STAND_INS, TRACING


def functional_leaves(model: nn.Module, table: Any) -> list[nn.Module]:
    """The handled leaves of ``model`` whose class is one of :data:`common.functional_modules.TYPES`."""
    return [m for m in model.modules() if _is_functional(type(m)) and table.is_leaf(m)]


def _is_functional(cls: type) -> bool:
    return cls.__name__ in TYPES and cls.__module__.startswith(("torch.ao.nn.quantized", "torch.nn.quantized"))


def _as_call(name: str) -> Any:
    def method(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        self.__dict__[_USED].add(name)
        real = QFUNCTIONAL_STAND_INS[name] if self.__dict__.get(TRACING) else getattr(type(self), name)
        self.__dict__["forward"] = types.MethodType(real, self)
        try:
            return self(*args, **kwargs)
        finally:
            self.__dict__.pop("forward", None)

    return method


_USED = "_torch2ir_methods"


@contextlib.contextmanager
def method_calls(model: nn.Module, table: Any) -> Iterator[dict[int, set[str]]]:
    """While converting ``model``: each method call of a functional leaf is a call of the module. Yields
    ``{id(module): names of the methods called}``, filled as the model runs."""
    leaves = functional_leaves(model, table)
    used: dict[int, set[str]] = {}
    try:
        for module in leaves:
            used[id(module)] = module.__dict__[_USED] = set()
            for name in METHODS:
                module.__dict__[name] = types.MethodType(_as_call(name), module)
        yield used
    finally:
        for module in leaves:
            for name in (*METHODS, _USED, "forward"):
                module.__dict__.pop(name, None)


def name_methods(ir: Any, table: Any, used: dict[int, set[str]]) -> list[Problem]:
    """Write on every call node of a functional leaf the method its calls ran. A module whose calls ran several
    methods is a problem: a call node runs one method (give each operation its own module, as torchvision does)."""
    refused: dict[str, str] = {}
    functional = set(TYPES.values())
    for impl in ir.values():
        for graph in impl.graphs():
            for node, attrs in graph.graph.nodes(data=True):
                key = attrs.get("implementation")
                if attrs["type"] not in functional or key not in table.module_of_key:
                    continue
                module = table.module_of_key[key]
                names = sorted(used.get(id(module), ()))
                if len(names) == 1:
                    attrs["method"] = names[0]
                else:
                    refused.setdefault(key, f"{type(module).__name__} called through "
                                       f"{' and '.join(names) or 'no method'} (node {node!r} of {impl.name!r}), "
                                       "where one call runs one method")
    return [(key, message, f"give each operation its own {type(table.module_of_key[key]).__name__}")
            for key, message in refused.items()]

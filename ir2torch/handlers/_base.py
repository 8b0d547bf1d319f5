"""Shared helper of the default builders: a module is its class called with the IR attributes."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from torch import nn

from common.errors import IRFormatError
from common.ir import Implementation

if TYPE_CHECKING:
    from ir2torch.converter import Builder, Ir2Torch


def constructor(cls: type[nn.Module]) -> Builder:
    """A builder calling ``cls(**impl.data)`` (on a copy: the module never aliases IR values).

    ``impl.data`` may not choose the device: the converter does (``device=``), so that a
    rebuild on ``meta`` allocates nothing and the memory budget measures what is built.

    Raises:
        IRFormatError: ``impl.data`` has a ``device`` argument.
    """

    def build(impl: Implementation) -> nn.Module:
        if "device" in impl.data:
            raise IRFormatError(f"the arguments of {impl.type!r} name a device ({impl.data['device']!r})",
                                implementation=impl.name, key="device",
                                hint="drop 'device' from the data; pass device= to ir2torch.convert")
        return cls(**fresh_copy(impl.data))

    build.__qualname__ = f"build_{cls.__name__}"
    build.module_class = cls  # type: ignore[attr-defined]  # read by ir2torch.rebuild.leaf_copies
    return build


#: Values ``copy.deepcopy`` returns as they are (immutable, holding nothing mutable).
_ATOMS = frozenset({int, float, bool, complex, str, bytes, type(None)})


def fresh_copy(data: Mapping[str, Any]) -> dict[str, Any]:
    """``copy.deepcopy(dict(data))``, without its walk when every value is an immutable atom (or a tuple of them),
    which it would return as it is (a builder's arguments mostly are: sizes, flags, rates)."""
    for value in data.values():
        kind = type(value)
        if kind not in _ATOMS and not (kind is tuple and all(type(v) in _ATOMS for v in value)):
            return copy.deepcopy(dict(data))
    return dict(data)


def register_table(converter: Ir2Torch, table: Mapping[str, type[nn.Module]]) -> None:
    """Register a :func:`constructor` builder for every ``{IR type: module class}`` of ``table``."""
    for type_str, cls in table.items():
        converter.register(type_str, constructor(cls))

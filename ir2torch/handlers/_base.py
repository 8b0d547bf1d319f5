"""Shared helper of the default builders: a module is its class called with the IR attributes."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING

from torch import nn

from common.errors import IRFormatError
from common.ir import Implementation

if TYPE_CHECKING:
    from ..converter import Builder, Ir2Torch


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
        return cls(**copy.deepcopy(impl.data))

    build.__qualname__ = f"build_{cls.__name__}"
    return build


def register_table(converter: Ir2Torch, table: Mapping[str, type[nn.Module]]) -> None:
    """Register a :func:`constructor` builder for every ``{IR type: module class}`` of ``table``."""
    for type_str, cls in table.items():
        converter.register(type_str, constructor(cls))

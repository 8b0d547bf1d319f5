"""Builders of containers that torch2ir records structurally (never called as a whole).

Their children are attached afterwards, in the original registration order, so
indexing (``layers[0]``), iteration and ``nn.Sequential``'s forward work as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from ir2torch.handlers._base import register_table

if TYPE_CHECKING:
    from ir2torch.converter import Ir2Torch

TABLE: dict[str, type[nn.Module]] = {
    "modulelist": nn.ModuleList,
    "moduledict": nn.ModuleDict,
    "sequential": nn.Sequential,
}


def register(converter: Ir2Torch) -> None:
    """Register the container builders on ``converter``."""
    register_table(converter, TABLE)

"""Handlers of dropout layers (Dropout, Dropout1d/2d/3d, AlphaDropout, FeatureAlphaDropout)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from torch2ir.handlers._base import register_table

if TYPE_CHECKING:
    from torch2ir.converter import Torch2Ir

_DROPOUT = ("p", "inplace")

TABLE: dict[type[nn.Module], tuple[str, ...]] = {
    nn.Dropout: _DROPOUT,
    nn.Dropout1d: _DROPOUT,
    nn.Dropout2d: _DROPOUT,
    nn.Dropout3d: _DROPOUT,
    nn.AlphaDropout: _DROPOUT,
    nn.FeatureAlphaDropout: _DROPOUT,
}


def register(converter: Torch2Ir) -> None:
    """Register the dropout handlers on ``converter``."""
    register_table(converter, TABLE)

"""Handlers of convolutions (Conv1d/2d/3d and ConvTranspose1d/2d/3d)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from torch2ir.handlers._base import register_table

if TYPE_CHECKING:
    from torch2ir.converter import Torch2Ir

_GEOMETRY = ("in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation", "groups")
_CONV = (*_GEOMETRY, "bias", "padding_mode")
_TRANSPOSED = (*_CONV, "output_padding")

TABLE: dict[type[nn.Module], tuple[str, ...]] = {
    nn.Conv1d: _CONV,
    nn.Conv2d: _CONV,
    nn.Conv3d: _CONV,
    nn.ConvTranspose1d: _TRANSPOSED,
    nn.ConvTranspose2d: _TRANSPOSED,
    nn.ConvTranspose3d: _TRANSPOSED,
}


def register(converter: Torch2Ir) -> None:
    """Register the convolution handlers on ``converter``."""
    register_table(converter, TABLE)

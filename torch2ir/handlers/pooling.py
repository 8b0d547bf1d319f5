"""Handlers of pooling layers (max, average, adaptive and power-average pooling, max unpooling)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from torch2ir.handlers._base import register_table

if TYPE_CHECKING:
    from torch2ir.converter import Torch2Ir

# a ``stride`` of None is stored as ``kernel_size``, which pools the same way
_MAX = ("kernel_size", "stride", "padding", "dilation", "return_indices", "ceil_mode")
_AVG = ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad")
_AVG_DIVISOR = (*_AVG, "divisor_override")
_LP = ("norm_type", "kernel_size", "stride", "ceil_mode")
_UNPOOL = ("kernel_size", "stride", "padding")

TABLE: dict[type[nn.Module], tuple[str, ...]] = {
    nn.MaxPool1d: _MAX,
    nn.MaxPool2d: _MAX,
    nn.MaxPool3d: _MAX,
    nn.AvgPool1d: _AVG,
    nn.AvgPool2d: _AVG_DIVISOR,
    nn.AvgPool3d: _AVG_DIVISOR,
    nn.AdaptiveMaxPool1d: ("output_size", "return_indices"),
    nn.AdaptiveMaxPool2d: ("output_size", "return_indices"),
    nn.AdaptiveMaxPool3d: ("output_size", "return_indices"),
    nn.AdaptiveAvgPool1d: ("output_size",),
    nn.AdaptiveAvgPool2d: ("output_size",),
    nn.AdaptiveAvgPool3d: ("output_size",),
    nn.LPPool1d: _LP,
    nn.LPPool2d: _LP,
    nn.LPPool3d: _LP,
    nn.MaxUnpool1d: _UNPOOL,
    nn.MaxUnpool2d: _UNPOOL,
    nn.MaxUnpool3d: _UNPOOL,
}


def register(converter: Torch2Ir) -> None:
    """Register the pooling handlers on ``converter``."""
    register_table(converter, TABLE)

"""Handlers of shape-changing layers (upsampling, pixel/channel shuffles, padding, fold/unfold)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from torch2ir.handlers._base import register_table

if TYPE_CHECKING:
    from torch2ir.converter import Torch2Ir

_PAD = ("padding",)
_CONSTANT_PAD = ("padding", "value")

TABLE: dict[type[nn.Module], tuple[str, ...]] = {
    nn.Upsample: ("size", "scale_factor", "mode", "align_corners", "recompute_scale_factor"),
    nn.UpsamplingNearest2d: ("size", "scale_factor"),
    nn.UpsamplingBilinear2d: ("size", "scale_factor"),
    nn.PixelShuffle: ("upscale_factor",),
    nn.PixelUnshuffle: ("downscale_factor",),
    nn.ChannelShuffle: ("groups",),
    nn.ZeroPad1d: _PAD,
    nn.ZeroPad2d: _PAD,
    nn.ZeroPad3d: _PAD,
    nn.ConstantPad1d: _CONSTANT_PAD,
    nn.ConstantPad2d: _CONSTANT_PAD,
    nn.ConstantPad3d: _CONSTANT_PAD,
    nn.ReflectionPad1d: _PAD,
    nn.ReflectionPad2d: _PAD,
    nn.ReflectionPad3d: _PAD,
    nn.ReplicationPad1d: _PAD,
    nn.ReplicationPad2d: _PAD,
    nn.ReplicationPad3d: _PAD,
    nn.CircularPad1d: _PAD,
    nn.CircularPad2d: _PAD,
    nn.CircularPad3d: _PAD,
    nn.Fold: ("output_size", "kernel_size", "dilation", "padding", "stride"),
    nn.Unfold: ("kernel_size", "dilation", "padding", "stride"),
}


def register(converter: Torch2Ir) -> None:
    """Register the shape-family handlers on ``converter``."""
    register_table(converter, TABLE)

"""Builders of shape-changing layers (upsampling, pixel/channel shuffles, padding, fold/unfold)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from ir2torch.handlers._base import register_table

if TYPE_CHECKING:
    from ir2torch.converter import Ir2Torch

TABLE: dict[str, type[nn.Module]] = {
    "upsample": nn.Upsample,
    "upsamplingnearest2d": nn.UpsamplingNearest2d,
    "upsamplingbilinear2d": nn.UpsamplingBilinear2d,
    "pixelshuffle": nn.PixelShuffle,
    "pixelunshuffle": nn.PixelUnshuffle,
    "channelshuffle": nn.ChannelShuffle,
    "zeropad1d": nn.ZeroPad1d,
    "zeropad2d": nn.ZeroPad2d,
    "zeropad3d": nn.ZeroPad3d,
    "constantpad1d": nn.ConstantPad1d,
    "constantpad2d": nn.ConstantPad2d,
    "constantpad3d": nn.ConstantPad3d,
    "reflectionpad1d": nn.ReflectionPad1d,
    "reflectionpad2d": nn.ReflectionPad2d,
    "reflectionpad3d": nn.ReflectionPad3d,
    "replicationpad1d": nn.ReplicationPad1d,
    "replicationpad2d": nn.ReplicationPad2d,
    "replicationpad3d": nn.ReplicationPad3d,
    "circularpad1d": nn.CircularPad1d,
    "circularpad2d": nn.CircularPad2d,
    "circularpad3d": nn.CircularPad3d,
    "fold": nn.Fold,
    "unfold": nn.Unfold,
}


def register(converter: Ir2Torch) -> None:
    """Register the shape-family builders on ``converter``."""
    register_table(converter, TABLE)

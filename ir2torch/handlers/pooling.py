"""Builders of pooling layers (max, average, adaptive and power-average pooling, max unpooling)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from ir2torch.handlers._base import register_table

if TYPE_CHECKING:
    from ir2torch.converter import Ir2Torch

TABLE: dict[str, type[nn.Module]] = {
    "maxpool1d": nn.MaxPool1d,
    "maxpool2d": nn.MaxPool2d,
    "maxpool3d": nn.MaxPool3d,
    "avgpool1d": nn.AvgPool1d,
    "avgpool2d": nn.AvgPool2d,
    "avgpool3d": nn.AvgPool3d,
    "adaptivemaxpool1d": nn.AdaptiveMaxPool1d,
    "adaptivemaxpool2d": nn.AdaptiveMaxPool2d,
    "adaptivemaxpool3d": nn.AdaptiveMaxPool3d,
    "adaptiveavgpool1d": nn.AdaptiveAvgPool1d,
    "adaptiveavgpool2d": nn.AdaptiveAvgPool2d,
    "adaptiveavgpool3d": nn.AdaptiveAvgPool3d,
    "lppool1d": nn.LPPool1d,
    "lppool2d": nn.LPPool2d,
    "lppool3d": nn.LPPool3d,
    "maxunpool1d": nn.MaxUnpool1d,
    "maxunpool2d": nn.MaxUnpool2d,
    "maxunpool3d": nn.MaxUnpool3d,
}


def register(converter: Ir2Torch) -> None:
    """Register the pooling-family builders on ``converter``."""
    register_table(converter, TABLE)

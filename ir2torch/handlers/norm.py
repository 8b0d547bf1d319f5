"""Builders of normalization layers (batch, instance, layer, group, RMS, local response)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from ir2torch.handlers._base import register_table

if TYPE_CHECKING:
    from ir2torch.converter import Ir2Torch

TABLE: dict[str, type[nn.Module]] = {
    "batchnorm1d": nn.BatchNorm1d,
    "batchnorm2d": nn.BatchNorm2d,
    "batchnorm3d": nn.BatchNorm3d,
    "instancenorm1d": nn.InstanceNorm1d,
    "instancenorm2d": nn.InstanceNorm2d,
    "instancenorm3d": nn.InstanceNorm3d,
    "layernorm": nn.LayerNorm,
    "groupnorm": nn.GroupNorm,
    "rmsnorm": nn.RMSNorm,
    "localresponsenorm": nn.LocalResponseNorm,
    "crossmaplrn2d": nn.CrossMapLRN2d,
}


def register(converter: Ir2Torch) -> None:
    """Register the norm-family builders on ``converter``."""
    register_table(converter, TABLE)

"""Handlers of normalization layers (batch, instance, layer, group, RMS, local response)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from torch2ir.handlers._base import register_table

if TYPE_CHECKING:
    from torch2ir.converter import Torch2Ir

# ``bias`` is ``module.bias is not None``: False whenever affine is off, which builds the same module.
_BATCH = ("num_features", "eps", "momentum", "affine", "track_running_stats", "bias")

TABLE: dict[type[nn.Module], tuple[str, ...]] = {
    nn.BatchNorm1d: _BATCH,
    nn.BatchNorm2d: _BATCH,
    nn.BatchNorm3d: _BATCH,
    nn.InstanceNorm1d: _BATCH,
    nn.InstanceNorm2d: _BATCH,
    nn.InstanceNorm3d: _BATCH,
    nn.LayerNorm: ("normalized_shape", "eps", "elementwise_affine", "bias"),
    nn.GroupNorm: ("num_groups", "num_channels", "eps", "affine", "bias"),
    nn.RMSNorm: ("normalized_shape", "eps", "elementwise_affine"),
    nn.LocalResponseNorm: ("size", "alpha", "beta", "k"),
    nn.CrossMapLRN2d: ("size", "alpha", "beta", "k"),
}


def register(converter: Torch2Ir) -> None:
    """Register the normalization handlers on ``converter``."""
    register_table(converter, TABLE)

"""Builders of convolutions (Conv1d/2d/3d and ConvTranspose1d/2d/3d)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from ir2torch.handlers._base import register_table

if TYPE_CHECKING:
    from ir2torch.converter import Ir2Torch

TABLE: dict[str, type[nn.Module]] = {
    "conv1d": nn.Conv1d,
    "conv2d": nn.Conv2d,
    "conv3d": nn.Conv3d,
    "convtranspose1d": nn.ConvTranspose1d,
    "convtranspose2d": nn.ConvTranspose2d,
    "convtranspose3d": nn.ConvTranspose3d,
}


def register(converter: Ir2Torch) -> None:
    """Register the conv-family builders on ``converter``."""
    register_table(converter, TABLE)

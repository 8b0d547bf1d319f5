"""Builders of dropout layers (Dropout, Dropout1d/2d/3d, AlphaDropout, FeatureAlphaDropout)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from ir2torch.handlers._base import register_table

if TYPE_CHECKING:
    from ir2torch.converter import Ir2Torch

TABLE: dict[str, type[nn.Module]] = {
    "dropout": nn.Dropout,
    "dropout1d": nn.Dropout1d,
    "dropout2d": nn.Dropout2d,
    "dropout3d": nn.Dropout3d,
    "alphadropout": nn.AlphaDropout,
    "featurealphadropout": nn.FeatureAlphaDropout,
}


def register(converter: Ir2Torch) -> None:
    """Register the dropout-family builders on ``converter``."""
    register_table(converter, TABLE)

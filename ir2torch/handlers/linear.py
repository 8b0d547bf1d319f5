"""Builders of linear layers and reshaping identities (Linear, Bilinear, Flatten, ...)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn
from torch.nn.modules.linear import NonDynamicallyQuantizableLinear

from ir2torch.handlers._base import register_table

if TYPE_CHECKING:
    from ir2torch.converter import Ir2Torch

TABLE: dict[str, type[nn.Module]] = {
    "linear": nn.Linear,
    "nondynamicallyquantizablelinear": NonDynamicallyQuantizableLinear,
    "bilinear": nn.Bilinear,
    "identity": nn.Identity,
    "flatten": nn.Flatten,
    "unflatten": nn.Unflatten,
}


def register(converter: Ir2Torch) -> None:
    """Register the linear-family builders on ``converter``."""
    register_table(converter, TABLE)

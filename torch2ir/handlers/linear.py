"""Handlers of linear layers and reshaping identities (Linear, Bilinear, Flatten, ...)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn
from torch.nn.modules.linear import NonDynamicallyQuantizableLinear

from torch2ir.handlers._base import register_table

if TYPE_CHECKING:
    from torch2ir.converter import Torch2Ir

TABLE: dict[type[nn.Module], tuple[str, ...]] = {
    nn.Linear: ("in_features", "out_features", "bias"),
    NonDynamicallyQuantizableLinear: ("in_features", "out_features", "bias"),
    nn.Bilinear: ("in1_features", "in2_features", "out_features", "bias"),
    nn.Identity: (),
    nn.Flatten: ("start_dim", "end_dim"),
    nn.Unflatten: ("dim", "unflattened_size"),
}


def register(converter: Torch2Ir) -> None:
    """Register the linear-family handlers on ``converter``."""
    register_table(converter, TABLE)

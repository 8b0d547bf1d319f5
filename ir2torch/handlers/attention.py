"""Builder of ``nn.MultiheadAttention``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from ir2torch.handlers._base import register_table

if TYPE_CHECKING:
    from ir2torch.converter import Ir2Torch

TABLE: dict[str, type[nn.Module]] = {
    "multiheadattention": nn.MultiheadAttention,
}


def register(converter: Ir2Torch) -> None:
    """Register the attention-family builders on ``converter``."""
    register_table(converter, TABLE)

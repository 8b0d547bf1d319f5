"""Handlers of distance layers (cosine similarity, pairwise distance)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from torch2ir.handlers._base import register_table

if TYPE_CHECKING:
    from torch2ir.converter import Torch2Ir

TABLE: dict[type[nn.Module], tuple[str, ...]] = {
    nn.CosineSimilarity: ("dim", "eps"),
    nn.PairwiseDistance: ("p", "eps", "keepdim"),  # ``p`` is stored as ``norm``
}


def register(converter: Torch2Ir) -> None:
    """Register the distance handlers on ``converter``."""
    register_table(converter, TABLE, {"p": lambda module: module.norm})

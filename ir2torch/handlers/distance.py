"""Builders of distance layers (cosine similarity, pairwise distance)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from ir2torch.handlers._base import register_table

if TYPE_CHECKING:
    from ir2torch.converter import Ir2Torch

TABLE: dict[str, type[nn.Module]] = {
    "cosinesimilarity": nn.CosineSimilarity,
    "pairwisedistance": nn.PairwiseDistance,
}


def register(converter: Ir2Torch) -> None:
    """Register the distance-family builders on ``converter``."""
    register_table(converter, TABLE)

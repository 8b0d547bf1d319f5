"""Builders of embedding tables (Embedding, EmbeddingBag)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from ir2torch.handlers._base import register_table

if TYPE_CHECKING:
    from ir2torch.converter import Ir2Torch

TABLE: dict[str, type[nn.Module]] = {
    "embedding": nn.Embedding,
    "embeddingbag": nn.EmbeddingBag,
}


def register(converter: Ir2Torch) -> None:
    """Register the embedding-family builders on ``converter``."""
    register_table(converter, TABLE)

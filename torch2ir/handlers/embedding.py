"""Handlers of embedding tables (Embedding, EmbeddingBag)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from torch2ir.handlers._base import register_table

if TYPE_CHECKING:
    from torch2ir.converter import Torch2Ir

_SIZES = ("num_embeddings", "embedding_dim")
_NORM = ("max_norm", "norm_type", "scale_grad_by_freq")

TABLE: dict[type[nn.Module], tuple[str, ...]] = {
    nn.Embedding: (*_SIZES, "padding_idx", *_NORM, "sparse"),
    nn.EmbeddingBag: (*_SIZES, *_NORM, "mode", "sparse", "include_last_offset", "padding_idx"),
}


def register(converter: Torch2Ir) -> None:
    """Register the embedding handlers on ``converter``."""
    register_table(converter, TABLE)

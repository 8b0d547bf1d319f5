"""Handlers of embedding tables (Embedding, EmbeddingBag)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from ._base import register_table

if TYPE_CHECKING:
    from ..converter import Torch2Ir

TABLE: dict[type[nn.Module], tuple[str, ...]] = {
    nn.Embedding: ("num_embeddings", "embedding_dim", "padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse"),
    nn.EmbeddingBag: (
        "num_embeddings", "embedding_dim", "max_norm", "norm_type", "scale_grad_by_freq",
        "mode", "sparse", "include_last_offset", "padding_idx",
    ),  # fmt: skip
}


def register(converter: Torch2Ir) -> None:
    """Register the embedding handlers on ``converter``."""
    register_table(converter, TABLE)

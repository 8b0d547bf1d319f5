"""Handler of ``nn.MultiheadAttention``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from torch2ir.handlers._base import Rule, register_table

if TYPE_CHECKING:
    from torch2ir.converter import Torch2Ir

# kdim/vdim of None are stored as embed_dim, which builds the same module
_MHA = ("embed_dim", "num_heads", "dropout", "bias", "add_bias_kv", "add_zero_attn", "kdim", "vdim", "batch_first")

TABLE: dict[type[nn.Module], tuple[str, ...]] = {nn.MultiheadAttention: _MHA}

RULES: dict[str, Rule] = {
    "bias": lambda module: module.in_proj_bias is not None,
    "add_bias_kv": lambda module: module.bias_k is not None,
}


def register(converter: Torch2Ir) -> None:
    """Register the attention handler on ``converter``."""
    register_table(converter, TABLE, RULES)

"""Handlers of recurrent layers (LSTM, GRU, RNN)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from ._base import register_table

if TYPE_CHECKING:
    from ..converter import Torch2Ir

# ``bias`` is a stored bool here (the biases are per-layer parameters), hence the rule below
_RNN = ("input_size", "hidden_size", "num_layers", "bias", "batch_first", "dropout", "bidirectional")

TABLE: dict[type[nn.Module], tuple[str, ...]] = {
    nn.LSTM: (*_RNN, "proj_size"),  # GRU and RNN refuse a proj_size argument
    nn.GRU: _RNN,
    nn.RNN: (*_RNN, "nonlinearity"),
}


def register(converter: Torch2Ir) -> None:
    """Register the recurrent handlers on ``converter``."""
    register_table(converter, TABLE, {"bias": lambda module: bool(module.bias)})

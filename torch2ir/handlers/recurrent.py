"""Handlers of recurrent layers (LSTM, GRU, RNN) and their cells."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from torch2ir.handlers._base import register_table

if TYPE_CHECKING:
    from torch2ir.converter import Torch2Ir

# ``bias`` is a stored bool here (the biases are per-layer parameters), hence the rule below
_CELL = ("input_size", "hidden_size", "bias")
_RNN = ("input_size", "hidden_size", "num_layers", "bias", "batch_first", "dropout", "bidirectional")

TABLE: dict[type[nn.Module], tuple[str, ...]] = {
    nn.LSTM: (*_RNN, "proj_size"),  # GRU and RNN refuse a proj_size argument
    nn.GRU: _RNN,
    nn.RNN: (*_RNN, "nonlinearity"),
    # a cell's ``bias`` is a stored bool too (its biases are the ``bias_ih``/``bias_hh`` parameters)
    nn.LSTMCell: _CELL,
    nn.GRUCell: _CELL,
    nn.RNNCell: (*_CELL, "nonlinearity"),
}


def register(converter: Torch2Ir) -> None:
    """Register the recurrent handlers on ``converter``."""
    register_table(converter, TABLE, {"bias": lambda module: bool(module.bias)})

"""Builders of recurrent layers (LSTM, GRU, RNN) and their cells."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from ir2torch.handlers._base import register_table

if TYPE_CHECKING:
    from ir2torch.converter import Ir2Torch

TABLE: dict[str, type[nn.Module]] = {
    "lstm": nn.LSTM,
    "gru": nn.GRU,
    "rnn": nn.RNN,
    "lstmcell": nn.LSTMCell,
    "grucell": nn.GRUCell,
    "rnncell": nn.RNNCell,
}


def register(converter: Ir2Torch) -> None:
    """Register the recurrent-family builders on ``converter``."""
    register_table(converter, TABLE)

"""Builders of activation functions (ReLU, GELU, Softmax, PReLU, ...)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from ir2torch.handlers._base import register_table

if TYPE_CHECKING:
    from ir2torch.converter import Ir2Torch

TABLE: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "relu6": nn.ReLU6,
    "silu": nn.SiLU,
    "mish": nn.Mish,
    "selu": nn.SELU,
    "hardswish": nn.Hardswish,
    "hardsigmoid": nn.Hardsigmoid,
    "gelu": nn.GELU,
    "sigmoid": nn.Sigmoid,
    "tanh": nn.Tanh,
    "softsign": nn.Softsign,
    "tanhshrink": nn.Tanhshrink,
    "softmax2d": nn.Softmax2d,
    "logsigmoid": nn.LogSigmoid,
    "softmax": nn.Softmax,
    "logsoftmax": nn.LogSoftmax,
    "softmin": nn.Softmin,
    "glu": nn.GLU,
    "leakyrelu": nn.LeakyReLU,
    "elu": nn.ELU,
    "celu": nn.CELU,
    "prelu": nn.PReLU,
    "hardtanh": nn.Hardtanh,
    "softplus": nn.Softplus,
    "threshold": nn.Threshold,
    "hardshrink": nn.Hardshrink,
    "softshrink": nn.Softshrink,
    "rrelu": nn.RReLU,
}


def register(converter: Ir2Torch) -> None:
    """Register the activation-family builders on ``converter``."""
    register_table(converter, TABLE)

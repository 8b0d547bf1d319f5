"""Handlers of activation functions (ReLU, GELU, Softmax, PReLU, ...)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from torch2ir.handlers._base import Rule, register_table

if TYPE_CHECKING:
    from torch2ir.converter import Torch2Ir

_INPLACE = ("inplace",)

TABLE: dict[type[nn.Module], tuple[str, ...]] = {
    nn.ReLU: _INPLACE,
    nn.ReLU6: _INPLACE,
    nn.SiLU: _INPLACE,
    nn.Mish: _INPLACE,
    nn.SELU: _INPLACE,
    nn.Hardswish: _INPLACE,
    nn.Hardsigmoid: _INPLACE,
    nn.GELU: ("approximate",),
    nn.Sigmoid: (),
    nn.Tanh: (),
    nn.Softsign: (),
    nn.Tanhshrink: (),
    nn.Softmax2d: (),
    nn.LogSigmoid: (),
    nn.Softmax: ("dim",),
    nn.LogSoftmax: ("dim",),
    nn.Softmin: ("dim",),
    nn.GLU: ("dim",),
    nn.LeakyReLU: ("negative_slope", "inplace"),
    nn.ELU: ("alpha", "inplace"),
    nn.CELU: ("alpha", "inplace"),
    nn.PReLU: ("num_parameters", "init"),
    nn.Hardtanh: ("min_val", "max_val", "inplace"),
    nn.Softplus: ("beta", "threshold"),
    nn.Threshold: ("threshold", "value", "inplace"),
    nn.Hardshrink: ("lambd",),
    nn.Softshrink: ("lambd",),
    nn.RReLU: ("lower", "upper", "inplace"),
}

RULES: dict[str, Rule] = {
    # modules unpickled from old torch versions may lack ``dim`` (it then means "implicit")
    "dim": lambda module: getattr(module, "dim", None),
    "num_parameters": lambda module: module.weight.numel(),
    # ``init`` only sets the initial weight (loaded afterwards); 0.25 is the default
    "init": lambda module: getattr(module, "init", 0.25),
}


def register(converter: Torch2Ir) -> None:
    """Register the activation handlers on ``converter``."""
    register_table(converter, TABLE, RULES)

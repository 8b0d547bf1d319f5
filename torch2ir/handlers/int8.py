"""Handlers of eager int8 modules (``torch.ao.quantization.convert``'s output, see :mod:`torch2ir.int8`).

Each records its constructor arguments; ``scale`` and ``zero_point`` are state where the module's
``state_dict()`` holds them (buffers of ``Quantize``, ``Hardswish``, ``LeakyReLU`` and the batch norms; the
unpacked state of convolutions, linears and ``QFunctional``) and arguments where it does not (``Sigmoid``,
``ELU``, ``Softmax``). IR types are prefixed ``int8_`` so they never clash with the float classes'.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch.ao.nn.intrinsic.quantized as nniq
import torch.ao.nn.quantized as nnq
from torch import nn
from torch.ao.nn.quantized.modules.linear import LinearPackedParams

from ._base import attribute_handler

if TYPE_CHECKING:
    from ..converter import Torch2Ir

_CONV = ("in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation", "groups", "bias",
         "padding_mode")
_LINEAR = ("in_features", "out_features", "bias")
_BN = ("num_features", "eps", "momentum")

#: ``{class: (IR type, constructor arguments)}`` of the int8 classes an IR carries.
INT8_TYPES: dict[type[nn.Module], tuple[str, tuple[str, ...]]] = {
    nnq.Quantize: ("int8_quantize", ("dtype",)),
    nnq.DeQuantize: ("int8_dequantize", ()),
    nnq.Conv1d: ("int8_conv1d", _CONV),
    nnq.Conv2d: ("int8_conv2d", _CONV),
    nnq.Conv3d: ("int8_conv3d", _CONV),
    nniq.ConvReLU1d: ("int8_convrelu1d", _CONV),
    nniq.ConvReLU2d: ("int8_convrelu2d", _CONV),
    nniq.ConvReLU3d: ("int8_convrelu3d", _CONV),
    nnq.Linear: ("int8_linear", _LINEAR),
    nniq.LinearReLU: ("int8_linearrelu", _LINEAR),
    LinearPackedParams: ("int8_linear_packed_params", ()),
    nnq.Hardswish: ("int8_hardswish", ()),
    nnq.ReLU6: ("int8_relu6", ("inplace",)),
    nnq.LeakyReLU: ("int8_leakyrelu", ("negative_slope", "inplace")),
    nnq.Sigmoid: ("int8_sigmoid", ("output_scale", "output_zero_point")),
    nnq.ELU: ("int8_elu", ("scale", "zero_point", "alpha")),
    nnq.Softmax: ("int8_softmax", ("dim", "scale", "zero_point")),
    nnq.BatchNorm2d: ("int8_batchnorm2d", _BN),
    nnq.BatchNorm3d: ("int8_batchnorm3d", _BN),
    nniq.BNReLU2d: ("int8_bnrelu2d", _BN),
    nniq.BNReLU3d: ("int8_bnrelu3d", _BN),
    nnq.Dropout: ("int8_dropout", ("p", "inplace")),
}

#: ``bias`` of a packed module is the presence of its packed bias (``module.bias`` is a method there).
_RULES = {"bias": lambda module: module._weight_bias()[1] is not None}


def register(converter: Torch2Ir) -> None:
    """Register the int8 handlers on ``converter`` (``QFunctional`` is registered with ``FloatFunctional``)."""
    for cls, (itype, names) in INT8_TYPES.items():
        converter.register(cls, attribute_handler(names, _RULES), type=itype)

"""Handlers of eager int8 modules (``torch.ao.quantization.convert``'s output, see :mod:`torch2ir.quant.int8`).

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

from common.quant import INT8_ARGUMENTS
from torch2ir.handlers._base import attribute_handler

if TYPE_CHECKING:
    from torch2ir.converter import Torch2Ir

#: ``{class: IR type}`` of the int8 classes an IR carries (their arguments: :data:`common.quant.INT8_ARGUMENTS`).
INT8_TYPES: dict[type[nn.Module], str] = {
    nnq.Quantize: "int8_quantize", nnq.DeQuantize: "int8_dequantize",
    nnq.Conv1d: "int8_conv1d", nnq.Conv2d: "int8_conv2d", nnq.Conv3d: "int8_conv3d",
    nniq.ConvReLU1d: "int8_convrelu1d", nniq.ConvReLU2d: "int8_convrelu2d", nniq.ConvReLU3d: "int8_convrelu3d",
    nnq.Linear: "int8_linear", nniq.LinearReLU: "int8_linearrelu", LinearPackedParams: "int8_linear_packed_params",
    nnq.Hardswish: "int8_hardswish", nnq.ReLU6: "int8_relu6", nnq.LeakyReLU: "int8_leakyrelu",
    nnq.Sigmoid: "int8_sigmoid", nnq.ELU: "int8_elu", nnq.Softmax: "int8_softmax", nnq.Dropout: "int8_dropout",
    nnq.BatchNorm2d: "int8_batchnorm2d", nnq.BatchNorm3d: "int8_batchnorm3d", nniq.BNReLU2d: "int8_bnrelu2d",
    nniq.BNReLU3d: "int8_bnrelu3d",
}

#: ``bias`` of a packed module is the presence of its packed bias (``module.bias`` is a method there).
_RULES = {"bias": lambda module: module._weight_bias()[1] is not None}


def register(converter: Torch2Ir) -> None:
    """Register the int8 handlers on ``converter`` (``QFunctional`` is registered with ``FloatFunctional``)."""
    for cls, itype in INT8_TYPES.items():
        converter.register(cls, attribute_handler(INT8_ARGUMENTS[itype], _RULES), type=itype)

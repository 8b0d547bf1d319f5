"""Builders of eager int8 modules (see :mod:`torch2ir.handlers.int8`).

Each builds the real ``torch.ao.nn.quantized`` class from its recorded arguments; ``scale`` / ``zero_point``
that are state come from the state dict (the constructor gets placeholders), and a packed weight and bias are
set by the module's own ``load_state_dict`` from their unpacked entries (:func:`common.state_dict.unpack_int8`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.ao.nn.intrinsic.quantized as nniq
import torch.ao.nn.quantized as nnq
from torch import nn
from torch.ao.nn.quantized.modules.linear import LinearPackedParams

from common.errors import IRFormatError
from common.ir import Implementation
from common.quant import INT8_ARGUMENTS
from ir2torch.handlers._base import fresh_copy
from ir2torch.handlers.quant import recorded_buffers

if TYPE_CHECKING:
    from ir2torch.converter import Builder, Ir2Torch

#: Quantized dtypes a ``Quantize`` may produce.
QUANTIZED_DTYPES = (torch.quint8, torch.qint8, torch.qint32)


def _quantize(dtype: Any) -> nn.Module:
    if dtype not in QUANTIZED_DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(map(str, QUANTIZED_DTYPES))}, not {dtype!r}")
    return nnq.Quantize(1.0, 0, dtype)  # scale and zero_point are buffers: the state dict sets them


#: ``{IR type: constructor of the recorded arguments}`` (:data:`common.quant.INT8_ARGUMENTS`).
TABLE: dict[str, Callable[..., nn.Module]] = {
    "int8_quantize": _quantize,
    "int8_dequantize": nnq.DeQuantize,
    **{f"int8_conv{d}d": getattr(nnq, f"Conv{d}d") for d in (1, 2, 3)},
    **{f"int8_convrelu{d}d": getattr(nniq, f"ConvReLU{d}d") for d in (1, 2, 3)},
    "int8_linear": lambda in_features, out_features, bias: nnq.Linear(in_features, out_features, bias),
    "int8_linearrelu": nniq.LinearReLU,
    "int8_linear_packed_params": LinearPackedParams,
    "int8_hardswish": lambda: nnq.Hardswish(1.0, 0),  # scale and zero_point are buffers: the state dict sets them
    "int8_relu6": nnq.ReLU6,
    "int8_leakyrelu": lambda negative_slope, inplace: nnq.LeakyReLU(1.0, 0, negative_slope, inplace),
    "int8_sigmoid": nnq.Sigmoid,
    "int8_elu": nnq.ELU,
    "int8_softmax": nnq.Softmax,
    "int8_batchnorm2d": nnq.BatchNorm2d,
    "int8_batchnorm3d": nnq.BatchNorm3d,
    "int8_bnrelu2d": nniq.BNReLU2d,
    "int8_bnrelu3d": nniq.BNReLU3d,
    "int8_dropout": nnq.Dropout,
}


def int8_builder(names: tuple[str, ...], make: Callable[..., nn.Module], itype: str) -> Builder:
    """A builder calling ``make(**impl.data)`` once ``impl.data`` holds exactly ``names``."""

    def build(impl: Implementation) -> nn.Module:
        if set(impl.data) != set(names):
            extra = sorted(set(impl.data) - set(names)) or sorted(set(names) - set(impl.data))
            raise IRFormatError(f"{itype!r} takes the arguments {', '.join(names) or 'none'}",
                                implementation=impl.name, key=extra[0],
                                hint="re-save the IR from the int8 model")
        module = make(**fresh_copy(impl.data))
        recorded_buffers(module, impl)  # a scale of shape (1,) where the constructor makes a 0-d one
        return module

    build.__qualname__ = f"build_{itype}"
    return build


def register(converter: Ir2Torch) -> None:
    """Register the int8 builders on ``converter`` (``QFunctional`` is registered with ``FloatFunctional``)."""
    for itype, make in TABLE.items():
        converter.register(itype, int8_builder(INT8_ARGUMENTS[itype], make, itype))


__all__: list[str] = ["TABLE", "int8_builder", "register"]

"""Handlers of torch.ao eager quantization modules: observers, fake-quantize, stubs, fused and QAT layers.

- Observers and fake-quantize modules record every plain attribute they hold (``dtype``, ``qscheme``,
  ``quant_min``, ``averaging_constant``, ``ch_axis``, ...), each checked against
  :data:`common.quant.ATTRIBUTES`; their statistics, scales, zero points and enable flags are buffers (state).
  A fake-quantize's observer is its child ``activation_post_process``, an implementation of its own.
- ``FloatFunctional`` / ``FXFloatFunctional``: no arguments; each call node names the method it runs
  (:mod:`common.functional_modules`), a ``FloatFunctional``'s observer is its child ``activation_post_process``.
- Fused float modules (``torch.ao.nn.intrinsic``: ``ConvBnReLU2d``, ``LinearReLU``, ...) are containers of
  their children: no arguments.
- QAT layers (``torch.ao.nn.qat``, ``torch.ao.nn.intrinsic.qat``) record their constructor arguments
  (``freeze_bn`` included, so ``freeze_bn_stats`` survives); their ``qconfig`` is recorded for every module in
  ``meta["qconfig"]`` (:mod:`torch2ir.hierarchy.modules`), their ``weight_fake_quant`` is a child implementation.

IR types are prefixed (``qat_linear``, ``fused_linearrelu``) so they never clash with ``torch.nn``'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch.ao.nn.intrinsic as nni
import torch.ao.nn.intrinsic.qat as nniqat
import torch.ao.nn.qat as nnqat
from torch import nn
from torch.ao import quantization as tq
from torch.ao.nn.quantized import FloatFunctional, FXFloatFunctional, QFunctional

from common.functional_modules import TYPES as FUNCTIONAL_TYPES
from common.quant import CLASSES, PT2E_OBSERVERS, attribute_to_data
from torch2ir.handlers._base import RULES, attribute_handler

if TYPE_CHECKING:
    from torch2ir.converter import Torch2Ir

_CONV = ("in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation", "groups", "bias",
         "padding_mode")
_CONV_BN = (*_CONV, "eps", "momentum", "freeze_bn")
_LINEAR = ("in_features", "out_features", "bias")

#: QAT layers: ``{class: (IR type, constructor arguments)}``.
QAT: dict[type[nn.Module], tuple[str, tuple[str, ...]]] = {
    nnqat.Linear: ("qat_linear", _LINEAR),
    nnqat.Conv1d: ("qat_conv1d", _CONV),
    nnqat.Conv2d: ("qat_conv2d", _CONV),
    nnqat.Conv3d: ("qat_conv3d", _CONV),
    nniqat.LinearReLU: ("qat_linearrelu", _LINEAR),
    nniqat.LinearBn1d: ("qat_linearbn1d", (*_LINEAR, "eps", "momentum", "freeze_bn")),
    nniqat.ConvReLU1d: ("qat_convrelu1d", _CONV),
    nniqat.ConvReLU2d: ("qat_convrelu2d", _CONV),
    nniqat.ConvReLU3d: ("qat_convrelu3d", _CONV),
    nniqat.ConvBn1d: ("qat_convbn1d", _CONV_BN),
    nniqat.ConvBn2d: ("qat_convbn2d", _CONV_BN),
    nniqat.ConvBn3d: ("qat_convbn3d", _CONV_BN),
    nniqat.ConvBnReLU1d: ("qat_convbnrelu1d", _CONV_BN),
    nniqat.ConvBnReLU2d: ("qat_convbnrelu2d", _CONV_BN),
    nniqat.ConvBnReLU3d: ("qat_convbnrelu3d", _CONV_BN),
}

#: Fused float modules (containers of their children), rebuilt around the children's implementations.
FUSED: tuple[type[nn.Module], ...] = (
    nni.ConvBn1d, nni.ConvBn2d, nni.ConvBn3d, nni.ConvBnReLU1d, nni.ConvBnReLU2d, nni.ConvBnReLU3d,
    nni.ConvReLU1d, nni.ConvReLU2d, nni.ConvReLU3d, nni.LinearReLU, nni.LinearBn1d, nni.BNReLU2d, nni.BNReLU3d,
    nni.LinearLeakyReLU, nni.LinearTanh,
)

#: Modules without arguments of their own (their qconfig is in ``meta``).
STUBS: dict[type[nn.Module], str] = {tq.QuantStub: "quantstub", tq.DeQuantStub: "dequantstub"}

#: Arguments a ConvBn / LinearBn reads from its ``bn`` child.
_BN_RULES = {"eps": lambda m: m.bn.eps, "momentum": lambda m: m.bn.momentum}


def attributes(module: nn.Module) -> dict[str, Any]:
    """Every plain attribute of an observer or fake-quantize module, as IR data (in ``vars`` order; its
    ``qconfig``, if any, is ``meta["qconfig"]``).

    Raises:
        ValueError: an attribute outside :data:`common.quant.ATTRIBUTES` or of the wrong type.
    """
    return {name: attribute_to_data(name, value) for name, value in vars(module).items()
            if not name.startswith("_") and name not in ("training", "qconfig")}


def register(converter: Torch2Ir) -> None:
    """Register the quantization handlers on ``converter``."""
    for name, cls in CLASSES.items():
        converter.register(cls, attributes, type=name.lower())
    for qualname, itype in PT2E_OBSERVERS.items():  # torchao's, registered when a model holds one
        converter.register_by_name(qualname, attributes, type=itype)
    for cls, itype in STUBS.items():
        converter.register(cls, lambda module: {}, type=itype)
    for cls in FUSED:
        converter.register(cls, lambda module: {}, type="fused_" + cls.__name__.lower())
    for cls in (FloatFunctional, FXFloatFunctional, QFunctional):  # each call names its method (functional_calls)
        converter.register(cls, lambda module: {}, type=FUNCTIONAL_TYPES[cls.__name__])
    rules = {**RULES, **_BN_RULES}
    for cls, (itype, names) in QAT.items():
        converter.register(cls, attribute_handler(names, rules), type=itype)

"""Builders of torch.ao eager quantization modules (see :mod:`torch2ir.handlers.quant`).

- Observers and fake-quantize modules: the class (from :data:`common.quant.CLASSES`) built with its default
  arguments, then each recorded attribute set, checked against :data:`common.quant.ATTRIBUTES`. Buffers whose
  recorded shape differs from the default one (a per-channel observer's ``min_val``, a histogram) are made
  with the recorded shape, for the state dict to fill. The child ``activation_post_process`` a fake-quantize
  builds is replaced by the IR's own child when the tree is assembled.
- QAT layers and stubs: the class called with the recorded arguments and the ``QConfig`` of
  ``meta["qconfig"]`` (required by the QAT classes; their ``weight_fake_quant`` is replaced likewise).
- ``FloatFunctional`` / ``FXFloatFunctional``: the class; its calls run the method each call node names
  (:mod:`common.functional_modules`).
- Fused float modules: built around placeholder children of the classes the constructor checks, which the
  IR's own children replace.

``meta["qconfig"]`` (any module) and ``meta["observer_hook"]`` (handled leaves) are restored on every
rebuilt module by :func:`restore_quantization`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch
import torch.ao.nn.intrinsic as nni
import torch.ao.nn.intrinsic.qat as nniqat
import torch.ao.nn.qat as nnqat
from torch import nn
from torch.ao import quantization as tq
from torch.ao.nn.quantized import FloatFunctional, FXFloatFunctional, QFunctional

from common.errors import IRFormatError
from common.functional_modules import TYPES as FUNCTIONAL_TYPES
from common.ir import IR, Implementation
from common.quant import CLASSES, PT2E_OBSERVERS, attribute_from_data, qconfig_from_data, register_hook
from ir2torch.handlers._base import fresh_copy

if TYPE_CHECKING:
    from ir2torch.converter import Builder, Ir2Torch

#: Default constructions of the classes that need arguments.
_DEFAULTS: dict[type, Callable[[], nn.Module]] = {
    tq.FixedQParamsObserver: lambda: tq.FixedQParamsObserver(scale=1.0, zero_point=0),
    tq.FixedQParamsFakeQuantize: lambda: tq.FixedQParamsFakeQuantize(
        tq.FixedQParamsObserver.with_args(scale=1.0, zero_point=0)),
}

QAT: dict[str, type[nn.Module]] = {
    "qat_linear": nnqat.Linear, "qat_conv1d": nnqat.Conv1d, "qat_conv2d": nnqat.Conv2d, "qat_conv3d": nnqat.Conv3d,
    "qat_linearrelu": nniqat.LinearReLU, "qat_linearbn1d": nniqat.LinearBn1d,
    "qat_convrelu1d": nniqat.ConvReLU1d, "qat_convrelu2d": nniqat.ConvReLU2d, "qat_convrelu3d": nniqat.ConvReLU3d,
    "qat_convbn1d": nniqat.ConvBn1d, "qat_convbn2d": nniqat.ConvBn2d, "qat_convbn3d": nniqat.ConvBn3d,
    "qat_convbnrelu1d": nniqat.ConvBnReLU1d, "qat_convbnrelu2d": nniqat.ConvBnReLU2d,
    "qat_convbnrelu3d": nniqat.ConvBnReLU3d,
}


def _conv(dim: int) -> nn.Module:
    return (nn.Conv1d, nn.Conv2d, nn.Conv3d)[dim - 1](1, 1, 1)


def _bn(dim: int) -> nn.Module:
    return (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)[dim - 1](1)


#: Fused float modules and their placeholder children.
FUSED: dict[str, tuple[type[nn.Module], Callable[[], tuple[nn.Module, ...]]]] = {
    **{f"fused_convbn{d}d": (getattr(nni, f"ConvBn{d}d"), lambda d=d: (_conv(d), _bn(d))) for d in (1, 2, 3)},
    **{f"fused_convbnrelu{d}d": (getattr(nni, f"ConvBnReLU{d}d"), lambda d=d: (_conv(d), _bn(d), nn.ReLU()))
       for d in (1, 2, 3)},
    **{f"fused_convrelu{d}d": (getattr(nni, f"ConvReLU{d}d"), lambda d=d: (_conv(d), nn.ReLU())) for d in (1, 2, 3)},
    "fused_linearrelu": (nni.LinearReLU, lambda: (nn.Linear(1, 1), nn.ReLU())),
    "fused_linearbn1d": (nni.LinearBn1d, lambda: (nn.Linear(1, 1), nn.BatchNorm1d(1))),
    "fused_bnrelu2d": (nni.BNReLU2d, lambda: (nn.BatchNorm2d(1), nn.ReLU())),
    "fused_bnrelu3d": (nni.BNReLU3d, lambda: (nn.BatchNorm3d(1), nn.ReLU())),
    "fused_linearleakyrelu": (nni.LinearLeakyReLU, lambda: (nn.Linear(1, 1), nn.LeakyReLU())),
    "fused_lineartanh": (nni.LinearTanh, lambda: (nn.Linear(1, 1), nn.Tanh())),
}


def _no_device(impl: Implementation) -> None:
    if "device" in impl.data or "qconfig" in impl.data:
        raise IRFormatError(f"the arguments of {impl.type!r} name a device or a qconfig", implementation=impl.name,
                            key="device" if "device" in impl.data else "qconfig",
                            hint="the qconfig is meta['qconfig']; pass device= to ir2torch.convert")


def recorded_buffers(module: nn.Module, impl: Implementation) -> None:
    """Make each buffer the IR records with another shape than the default one an empty tensor of that shape."""
    for name, rec in impl.state.items():
        current = module._buffers.get(name)
        if rec.get("kind") != "buffer" or not isinstance(current, torch.Tensor):
            continue
        shape = rec.get("shape")
        if not (isinstance(shape, (list, tuple)) and all(isinstance(d, int) and d >= 0 for d in shape)):
            raise IRFormatError(f"the state record {name!r} has no valid shape", implementation=impl.name, key=name,
                                hint="re-save the IR from the model")
        if tuple(current.shape) != tuple(shape):
            module._buffers[name] = torch.empty(tuple(shape), dtype=current.dtype)


def observer(cls: type[nn.Module]) -> Builder:
    """A builder of observer / fake-quantize class ``cls``: its default, then the recorded attributes."""

    def build(impl: Implementation) -> nn.Module:
        values = {name: attribute_from_data(name, value, impl.name) for name, value in impl.data.items()}
        module = _DEFAULTS.get(cls, cls)()
        for name, value in values.items():
            setattr(module, name, value)
        recorded_buffers(module, impl)
        return module

    build.__qualname__ = f"build_{cls.__name__}"
    return build


def pt2e_observer(qualname: str) -> Builder:
    """A builder of the torchao observer class ``qualname`` (one of :data:`common.quant.PT2E_OBSERVERS`, a fixed
    name: nothing an IR holds is imported), as :func:`observer`; torchao is imported when the first is built.

    Raises:
        IRFormatError: torchao is not installed.
    """
    module_name, _, class_name = qualname.rpartition(".")

    def build(impl: Implementation) -> nn.Module:
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
        except ImportError as exc:
            raise IRFormatError(f"{impl.type!r} is torchao's {class_name}, and torchao cannot be imported ({exc})",
                                implementation=impl.name, hint="pip install torchao") from exc
        return observer(cls)(impl)

    build.__qualname__ = f"build_{class_name}"
    return build


def _qconfig(impl: Implementation, required: bool, module: nn.Module | None = None) -> Any:
    data = impl.meta.get("qconfig")
    if data is None:
        if required:
            raise IRFormatError(f"{impl.type!r} needs a qconfig and meta.qconfig is missing", implementation=impl.name,
                                key="qconfig", hint="re-save the IR from the prepared model")
        return None
    return qconfig_from_data(data, impl.name, module)


def qat(cls: type[nn.Module]) -> Builder:
    """A builder calling the QAT class ``cls(**impl.data, qconfig=<meta.qconfig>)``."""

    def build(impl: Implementation) -> nn.Module:
        _no_device(impl)
        return cls(**fresh_copy(impl.data), qconfig=_qconfig(impl, True))

    build.__qualname__ = f"build_{cls.__name__}"
    return build


def stub(cls: type[nn.Module]) -> Builder:
    """A builder of ``QuantStub`` / ``DeQuantStub`` with the qconfig of ``meta``."""

    def build(impl: Implementation) -> nn.Module:
        if impl.data:
            raise IRFormatError(f"{impl.type!r} takes no arguments", implementation=impl.name,
                                key=next(iter(impl.data)), hint="its qconfig is meta['qconfig']")
        return cls(_qconfig(impl, False))

    return build


def fused(cls: type[nn.Module], children: Callable[[], tuple[nn.Module, ...]]) -> Builder:
    """A builder of a fused float module around placeholder children (replaced by the IR's own)."""

    def build(impl: Implementation) -> nn.Module:
        if impl.data:
            raise IRFormatError(f"{impl.type!r} takes no arguments", implementation=impl.name,
                                key=next(iter(impl.data)), hint="a fused module is its children")
        return cls(*children())

    return build


def functional(cls: type[nn.Module]) -> Builder:
    """A builder of ``FloatFunctional`` / ``FXFloatFunctional``: no arguments (each call node names its method)."""

    def build(impl: Implementation) -> nn.Module:
        if impl.data:
            raise IRFormatError(f"{impl.type!r} takes no arguments", implementation=impl.name,
                                key=next(iter(impl.data)), hint="each call node names the method it runs")
        return cls()

    build.__qualname__ = f"build_{cls.__name__}"
    return build


def restore_quantization(ir: IR, modules: Mapping[str, nn.Module]) -> None:
    """Set ``qconfig`` (``meta["qconfig"]``) and register the observer hook (``meta["observer_hook"]``) on every
    rebuilt module that had them, after the tree is assembled (a hook calls the ``activation_post_process``
    child).

    Raises:
        IRFormatError: a qconfig or hook name outside the allowed data.
    """
    for key, impl in ir.items():
        module = modules[key]
        if "qconfig" in impl.meta:
            module.qconfig = _qconfig(impl, True, module)
        if "observer_hook" in impl.meta:
            register_hook(module, impl.meta["observer_hook"], key)


def register(converter: Ir2Torch) -> None:
    """Register the quantization builders on ``converter``."""
    for name, cls in CLASSES.items():
        converter.register(name.lower(), observer(cls))
    for qualname, itype in PT2E_OBSERVERS.items():
        converter.register(itype, pt2e_observer(qualname))
    converter.register("quantstub", stub(tq.QuantStub))
    converter.register("dequantstub", stub(tq.DeQuantStub))
    for type_str, (cls, children) in FUSED.items():
        converter.register(type_str, fused(cls, children))
    for type_str, cls in QAT.items():
        converter.register(type_str, qat(cls))
    for cls in (FloatFunctional, FXFloatFunctional, QFunctional):
        converter.register(FUNCTIONAL_TYPES[cls.__name__], functional(cls))

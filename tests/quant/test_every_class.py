"""Every torch.ao class with a quantization handler round-trips on its own: the rebuilt module is of the same
class, with the same state, and gives the same outputs in eval and in train mode (observers observe, fake
quantizers quantize). The list of classes comes from the registries, so a class registered without a case here
fails ``test_every_registered_quant_class_has_a_case``."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn
from torch.ao import quantization as tq
from torch.ao.nn.quantized import FloatFunctional, FXFloatFunctional

import ir2torch
import torch2ir
from common.quant import CLASSES
from torch2ir.handlers.quant import FUSED, QAT, STUBS
from torch2ir.quant.int8 import INT8

QCONFIG = tq.get_default_qat_qconfig("x86")


def _conv(d: int) -> nn.Module:
    return {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}[d](3, 4, 1)


def _bn(d: int) -> nn.Module:
    return {1: nn.BatchNorm1d, 2: nn.BatchNorm2d, 3: nn.BatchNorm3d}[d](4)


def _input(d: int) -> torch.Tensor:
    return torch.randn(2, 3, *([3] * d), generator=torch.Generator().manual_seed(d))


def _fused(cls: type) -> tuple[nn.Module, torch.Tensor]:
    name = cls.__name__
    d = int(name[-2]) if name[-2:-1].isdigit() else 0
    if name.startswith("ConvBnReLU"):
        return cls(_conv(d), _bn(d), nn.ReLU()), _input(d)
    if name.startswith("ConvBn"):
        return cls(_conv(d), _bn(d)), _input(d)
    if name.startswith("ConvReLU"):
        return cls(_conv(d), nn.ReLU()), _input(d)
    if name.startswith("BNReLU"):
        return cls(nn.BatchNorm2d(3) if d == 2 else nn.BatchNorm3d(3), nn.ReLU()), _input(d)
    act = {"LinearReLU": nn.ReLU(), "LinearLeakyReLU": nn.LeakyReLU(0.1), "LinearTanh": nn.Tanh(),
           "LinearBn1d": nn.BatchNorm1d(4)}[name]
    return cls(nn.Linear(3, 4), act), torch.randn(5, 3, generator=torch.Generator().manual_seed(0))


def _qat(cls: type) -> tuple[nn.Module, torch.Tensor]:
    name = cls.__name__
    d = int(name[-2]) if name[-2:-1].isdigit() else 0
    if "Linear" in name:
        return cls(3, 4, qconfig=QCONFIG), torch.randn(5, 3, generator=torch.Generator().manual_seed(0))
    return cls(3, 4, 1, qconfig=QCONFIG), _input(d)


def _observer(cls: type) -> tuple[nn.Module, torch.Tensor]:
    if cls is tq.FixedQParamsObserver:
        return cls(scale=1.0 / 256, zero_point=0), torch.rand(4, 3)
    if cls is tq.FixedQParamsFakeQuantize:
        return cls(observer=tq.FixedQParamsObserver.with_args(scale=1.0 / 256, zero_point=0)), torch.rand(4, 3)
    return cls(), torch.randn(4, 3, generator=torch.Generator().manual_seed(3))


class _Wrap(nn.Module):
    """One module under test (a QAT Linear needs a batch of rows, an observer any tensor)."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if isinstance(self.inner, (FloatFunctional, FXFloatFunctional)):  # computes in its methods
            return self.inner.add(x, x)
        out = self.inner(x)
        return out if isinstance(out, torch.Tensor) else x


CASES = [*((c, _fused) for c in FUSED), *((c, _qat) for c in QAT), *((c, _observer) for c in CLASSES.values()),
         *((c, lambda c: (c(), torch.randn(4, 3))) for c in (*STUBS, FloatFunctional, FXFloatFunctional))]


def test_every_registered_quant_class_has_a_case() -> None:
    registered = {cls for cls in torch2ir.get_default_converter().types() if cls.__module__.startswith("torch.ao")}
    assert registered - set(INT8) == {c for c, _ in CASES}  # int8 classes: tests/quant/test_int8.py


@pytest.mark.parametrize("mode", ["eval", "train"])
@pytest.mark.parametrize(("cls", "make"), CASES, ids=lambda v: getattr(v, "__name__", ""))
def test_quant_class_round_trips_alone(cls: type, make, mode: str) -> None:
    torch.manual_seed(0)
    inner, x = make(cls)
    model = _Wrap(inner).train(mode == "train")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ir = torch2ir.convert(model, (x,))
        rebuilt = ir2torch.convert(ir, {k: v.clone() for k, v in model.state_dict().items()})
    assert type(rebuilt.inner) is cls
    reference, copy_ = copy.deepcopy(model), rebuilt
    with torch.no_grad():  # exact, NaN where the original gives NaN (a one-row batch statistic can be NaN)
        torch.testing.assert_close(copy_(x), reference(x), rtol=0, atol=0, equal_nan=True)
    assert sorted(reference.state_dict()) == sorted(copy_.state_dict())
    for key, value in reference.state_dict().items():  # observers updated their statistics alike
        torch.testing.assert_close(copy_.state_dict()[key], value, rtol=0, atol=0, equal_nan=True, msg=key)

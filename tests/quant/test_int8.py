"""An eager int8 model (after ``torch.ao.quantization.convert``) is refused before tracing, naming its int8 modules
and what to convert instead; the same model before ``convert`` converts and rebuilds exactly."""

from __future__ import annotations

import pytest
import torch
import torch.ao.quantization as tq
from torch import nn

import ir2torch
import torch2ir
from common.errors import ConversionError
from torch2ir.int8 import int8_modules


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.quant, self.dequant = tq.QuantStub(), tq.DeQuantStub()
        self.conv = nn.Conv2d(3, 4, 3)
        self.add = nn.quantized.FloatFunctional()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(self.quant(x))
        return self.dequant(self.add.add(y, y))


def _prepared() -> nn.Module:
    torch.manual_seed(0)
    model = Small().eval()
    model.qconfig = tq.get_default_qconfig("x86")
    prepared = tq.prepare(model)
    prepared(torch.randn(2, 3, 8, 8))
    return prepared


def test_an_int8_model_is_refused_naming_its_modules():
    int8 = tq.convert(_prepared())
    assert [p for p, _ in int8_modules(int8)] == ["quant", "dequant", "conv", "add"]
    with pytest.raises(ConversionError, match=r"4 eager int8 modules \(made by torch.ao.quantization.convert\): "
                       r"quant \(Quantize\), dequant \(DeQuantize\), conv \(Conv2d\), \.\.\.") as info:
        torch2ir.convert(int8, (torch.randn(2, 3, 8, 8),))
    assert "before tq.convert" in info.value.hint


def test_the_model_before_convert_round_trips_exactly():
    prepared = _prepared()
    x = torch.randn(2, 3, 8, 8)
    assert int8_modules(prepared) == []  # FloatFunctional computes in float until convert
    rebuilt = ir2torch.convert(torch2ir.convert(prepared, (x,)), prepared.state_dict())
    assert torch.equal(rebuilt(x), prepared(x))

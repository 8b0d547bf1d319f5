"""brevitas (#15 point 3): a QuantIdentity / QuantConv2d / QuantReLU / QuantLinear network round-trips exactly
from its own ``state_dict()``; the buffers brevitas keeps out of that state dict travel with the IR, and where
they are absent (a model converted on ``meta``) the error names them, with ``strict=False`` too."""

from __future__ import annotations

import warnings

import brevitas.nn as qnn
import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common import IR
from common.errors import SHOWN, StateDictError


class BrevitasNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = qnn.QuantIdentity()
        self.conv = qnn.QuantConv2d(3, 4, 3, weight_bit_width=4)
        self.relu = qnn.QuantReLU()
        self.lin = qnn.QuantLinear(4, 5, bias=True, weight_bit_width=4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(self.relu(self.conv(self.inp(x))).mean((2, 3)))


X = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(0))


def _model() -> nn.Module:
    torch.manual_seed(0)
    model = BrevitasNet().eval()
    model(X)
    return model


def _convert(model: nn.Module) -> IR:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the train-mode note about brevitas' stats buffers: eval mode is exact
        return torch2ir.convert(model, (X,))


def test_brevitas_network_round_trips_exactly_from_its_own_state_dict(tmp_path) -> None:
    model = _model()
    before = model.state_dict()
    ir = _convert(model)
    # converting runs the model's code (export, the train-mode pass) but leaves its attributes as they were:
    # brevitas' runtime-stats counter (a Python int) still says no statistics were collected, so the state dict
    # still leaves scaling_impl.value out, and the IR carries its value instead
    state = model.state_dict()
    assert list(state) == list(before)
    assert not any(k.endswith("scaling_impl.value") for k in state)
    hidden = {k for k, _ in model.named_buffers()} - set(state)
    assert len(hidden) >= 10  # brevitas keeps these registered buffers out of its state dict
    ir.save(tmp_path / "b.ir.json")
    rebuilt = ir2torch.convert(IR.load(tmp_path / "b.ir.json"), state)
    assert list(rebuilt.state_dict()) == list(state)
    assert all(torch.equal(v, rebuilt.state_dict()[k]) for k, v in state.items())
    buffers = dict(rebuilt.named_buffers())
    assert all(torch.equal(dict(model.named_buffers())[k], buffers[k]) for k in hidden)
    out = model(X)
    assert torch.equal(out, rebuilt(X)) and out.abs().max() > 0


@pytest.mark.parametrize("strict", [True, False])
def test_brevitas_buffers_absent_from_the_state_dict_are_named(strict: bool) -> None:
    model = _model()
    ir = _convert(model)
    # registered buffers and parameters (the uncollected scale) brevitas keeps out of its state dict
    hidden = sorted({k for k, _ in (*model.named_buffers(), *model.named_parameters())} - set(model.state_dict()))
    assert sorted(ir.tensors) == hidden  # carried by the IR ...
    ir.tensors.clear()  # ... and absent, as from a model converted without values
    with pytest.raises(StateDictError) as info:
        ir2torch.convert(ir, model.state_dict(), strict=strict)
    text = info.value.message  # the first few named, the rest counted
    assert f"no value for {len(hidden)} tensor" in text and any(name in text for name in hidden)
    assert len(hidden) <= SHOWN or f"... and {len(hidden) - SHOWN} more" in text
    # the documented way: pass the buffers (and parameters) along with the weights
    rebuilt = ir2torch.convert(ir, {**model.state_dict(), **dict(model.named_buffers()),
                                    **dict(model.named_parameters())}, strict=strict)
    assert torch.equal(model(X), rebuilt(X))

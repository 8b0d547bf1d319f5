"""The state dict loads into a rebuild with the rebuilt modules' state-dict versions, as ``load_state_dict`` of
``model.state_dict()`` would: without them torch takes the entries for a first-version checkpoint's, and an
observer resets its ``eps`` to float32's epsilon, losing a qconfig's own (XNNPACK's ``eps=2**-12``) silently."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.ao import quantization as tq

import ir2torch
import torch2ir
from common.state_dict import save_safetensors

EPS = 2.0**-12


@pytest.mark.parametrize("make", [
    lambda: tq.MinMaxObserver(eps=EPS),
    lambda: tq.HistogramObserver(eps=EPS),
    lambda: tq.FakeQuantize(observer=tq.MovingAverageMinMaxObserver.with_args(eps=EPS)),
    lambda: tq.FusedMovingAvgObsFakeQuantize(observer=tq.MovingAverageMinMaxObserver.with_args(eps=EPS)),
], ids=["minmax", "histogram", "fakequantize", "fused"])
@pytest.mark.parametrize("source", ["dict", "safetensors"])
def test_an_observers_own_eps_survives_the_rebuild(make, source, tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), make())
    x = torch.randn(4, 3)
    model(x)
    eps = [v for k, v in model.state_dict().items() if k.endswith("eps")]
    assert eps and all(float(v) == EPS for v in eps)
    state = model.state_dict()
    if source == "safetensors":
        save_safetensors(state, tmp_path / "m.safetensors")
        state = tmp_path / "m.safetensors"
    rebuilt = ir2torch.convert(torch2ir.convert(model, (x,)), state)
    got = {k: v for k, v in rebuilt.state_dict().items() if k.endswith("eps")}
    assert got.keys() == {k for k in model.state_dict() if k.endswith("eps")}
    assert all(float(v) == EPS for v in got.values())
    for _ in range(2):  # and the two keep computing alike
        y = torch.randn(4, 3) * 1e-3
        assert torch.equal(rebuilt(y), model(y))

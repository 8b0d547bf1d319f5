"""Overrides: per converter, scoped by path or predicate, with state maps (the hardware-team
walk-through of docs/extending.md runs here as a test)."""

from __future__ import annotations

from typing import ClassVar

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import ir2torch
import torch2ir
from common.errors import DuplicateHandlerError, HandlerNotFoundError
from tests.helpers import converted, max_abs_diff


class MarkedLinear(nn.Linear):
    """An nn.Linear that remembers it was built by an override."""


def _marked(impl):
    return MarkedLinear(impl.data["in_features"], impl.data["out_features"], bias=impl.data["bias"])


def _marked_paths(model):
    return {p for p, m in model.named_modules() if isinstance(m, MarkedLinear)}


def test_override_on_one_converter_leaves_defaults_alone():
    _, model, _, _, ir = converted("bert")
    mine = ir2torch.get_default_converter()
    mine.register_override("linear", _marked)
    assert _marked_paths(mine.convert(ir)) == {p for p, m in model.named_modules() if type(m) is nn.Linear}
    assert _marked_paths(ir2torch.get_default_converter().convert(ir)) == set()
    assert _marked_paths(ir2torch.convert(ir)) == set()


@pytest.mark.parametrize(
    "where", ["encoder.layer.0.*", lambda path: path.startswith("encoder.layer.0.")], ids=["glob", "predicate"]
)
def test_scoped_override_hits_exactly_the_matching_paths(where):
    _, model, args, kwargs, ir = converted("bert")
    mine = ir2torch.get_default_converter()
    mine.register_override("linear", _marked, where=where)
    rebuilt = mine.convert(ir, model.state_dict())
    expected = {p for p, m in model.named_modules() if type(m) is nn.Linear and p.startswith("encoder.layer.0.")}
    assert expected and _marked_paths(rebuilt) == expected
    with torch.no_grad():
        assert max_abs_diff(model(*args, **kwargs), rebuilt(*args, **kwargs)) == 0.0


def test_register_existing_and_override_missing_are_refused():
    conv = ir2torch.get_default_converter()
    with pytest.raises(DuplicateHandlerError):
        conv.register("linear", _marked)
    with pytest.raises(HandlerNotFoundError, match="lineer"):
        conv.register_override("lineer", _marked)


# -- the walk-through of docs/extending.md ---------------------------------------------------
class QuantLinear(nn.Module):
    """Fake-quantized int8 linear: int8 weights ``weight_q`` and one ``scale`` per output row."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer("weight_q", torch.zeros(out_features, in_features, dtype=torch.int8))
        self.scale = nn.Parameter(torch.ones(out_features, 1))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight_q.float() * self.scale, self.bias)


def quantize(impl, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """State map: the original ``weight`` becomes ``weight_q`` (int8) and ``scale``."""
    weight = state.pop("weight")
    scale = weight.abs().amax(dim=1, keepdim=True).clamp_min(1e-8) / 127
    return {"weight_q": torch.round(weight / scale).to(torch.int8), "scale": scale, **state}


def test_hardware_team_walkthrough_quantized_bert():
    case, model, args, kwargs, ir = converted("bert")
    before = {k: v.clone() for k, v in model.state_dict().items()}

    hw = ir2torch.get_default_converter()
    hw.register_override("linear", lambda impl: QuantLinear(**impl.data), where="encoder.*", state_map=quantize)
    quantized = hw.convert(ir, model.state_dict())

    assert {p for p, m in quantized.named_modules() if isinstance(m, QuantLinear)} == {
        p for p, m in model.named_modules() if type(m) is nn.Linear and p.startswith("encoder.")
    }
    with torch.no_grad():
        diff = max_abs_diff(model(*args, **kwargs), quantized(*args, **kwargs))
    assert 0 < diff < 0.1  # int8 weights change the numbers a little, not the model
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # original untouched

    # export the modified model's IR again: QuantLinear gets a handler of its own
    t2i = torch2ir.get_default_converter()
    t2i.register(QuantLinear, lambda m: {"in_features": m.in_features, "out_features": m.out_features,
                                         "bias": m.bias is not None})
    again = t2i.convert(quantized, args, kwargs)
    assert {k for k, impl in again.items() if impl.type == "quantlinear"} == _quant_paths(quantized)
    hw2 = ir2torch.get_default_converter()
    hw2.register("quantlinear", lambda impl: QuantLinear(**impl.data))
    rebuilt = hw2.convert(again, quantized.state_dict())
    with torch.no_grad():
        assert max_abs_diff(quantized(*args, **kwargs), rebuilt(*args, **kwargs)) == 0.0
    assert case.name == "bert"


def _quant_paths(model):
    return {p for p, m in model.named_modules() if isinstance(m, QuantLinear)}


class _CountedTrain(nn.Linear):
    """An nn.Linear with its own ``train``, counting its calls."""

    calls: ClassVar[list[bool]] = []

    def train(self, mode: bool = True) -> _CountedTrain:
        type(self).calls.append(mode)
        return super().train(mode)


def test_modes_are_restored_and_a_class_with_its_own_train_sees_each_call():
    ir = converted("bert")[-1]
    rebuilt = ir2torch.convert(ir)
    assert not any(m.training for m in rebuilt.modules())  # eval everywhere, as recorded
    mine = ir2torch.get_default_converter()
    mine.register_override("linear", lambda impl: _CountedTrain(impl.data["in_features"], impl.data["out_features"],
                                                                 bias=impl.data["bias"]))
    _CountedTrain.calls.clear()
    rebuilt = mine.convert(ir)
    linears = [p for p, m in rebuilt.named_modules() if isinstance(m, _CountedTrain)]
    # each linear's own call, plus one from every implementation above it whose train() recurses into it
    expected = sum(1 + sum(1 for k in ir if k == "root" or p.startswith(k + ".")) for p in linears)
    assert linears and _CountedTrain.calls == [False] * expected
    assert not any(m.training for m in rebuilt.modules())

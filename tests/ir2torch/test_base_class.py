"""Subclasses keep their base class (issue 51, point 5): a subclass of a ``torch.nn`` class with a forward of its
own is rebuilt from its graph as an instance of that base class (``isinstance(m, nn.Linear)``, the base's
attributes and parameters), its forward exact; an ``nn.Sequential`` called with several shapes stays an
``nn.Sequential``. The record (``meta["base"]``, :mod:`common.base_class`) is checked when rebuilt: a hostile one
is an ``IRError``, and nothing is imported or run. timm's and swiftformer's: tests/ecosystems/test_timm_bases.py.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common import IR
from common.base_class import BASE_KEY
from common.errors import IRError


class DoubledLinear(nn.Linear):
    """A Linear whose own forward scales its weight (as timm's ``Linear`` has its own forward)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(x, self.weight * 2, self.bias)


class StdConv(nn.Conv2d):
    """A weight-standardised convolution (timm's ``StdConv2d``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        w = w - w.mean((1, 2, 3), keepdim=True)
        w = w / ((w * w).mean((1, 2, 3), keepdim=True) + 1e-6).sqrt()
        return self._conv_forward(x, w, self.bias)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = StdConv(3, 4, 3, padding=1, bias=False)
        self.lin = DoubledLinear(4, 5)
        self.head = DoubledLinear(5, 2, bias=False)
        self.seq = nn.Sequential(nn.Linear(2, 2), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.head(self.lin(self.conv(x).mean((2, 3))))
        return self.seq(y) + self.seq(y.unsqueeze(0)).sum(0)  # the Sequential called with two shapes


X = torch.randn(2, 3, 6, 6, generator=torch.Generator().manual_seed(0))


def _net() -> nn.Module:
    torch.manual_seed(0)
    return Net()


def test_subclasses_are_rebuilt_as_their_base_class() -> None:
    model = _net().eval()
    ir = torch2ir.convert(model, (X,))
    assert ir["lin"].type == "module" and ir["lin"].meta[BASE_KEY] == {
        "type": "linear", "data": {"in_features": 4, "out_features": 5, "bias": True}}
    assert ir["seq"].meta[BASE_KEY] == {"type": "sequential", "data": {}} and ir["seq"].variants
    rebuilt = ir2torch.convert(ir, model.state_dict())
    assert torch.equal(rebuilt(X), model(X))
    for path, base in (("conv", nn.Conv2d), ("lin", nn.Linear), ("head", nn.Linear), ("seq", nn.Sequential)):
        module = rebuilt.get_submodule(path)
        assert isinstance(module, base) and isinstance(module, torch.fx.GraphModule), path
    assert [n for n, _ in rebuilt.lin.named_parameters()] == ["weight", "bias"]
    assert rebuilt.head.bias is None and [n for n, _ in rebuilt.head.named_parameters()] == ["weight"]
    assert (rebuilt.lin.in_features, rebuilt.lin.out_features) == (4, 5)
    assert rebuilt.conv.kernel_size == (3, 3) and rebuilt.conv.padding == (1, 1)
    assert len(rebuilt.seq) == 2 and isinstance(rebuilt.seq[0], nn.Linear)
    assert rebuilt.lin.extra_repr() == model.lin.extra_repr()
    # the forward is the subclass's, not the base's: the weight is doubled
    assert torch.equal(rebuilt.lin(torch.ones(1, 4)), model.lin(torch.ones(1, 4)))
    assert not torch.equal(nn.Linear.forward(rebuilt.lin, torch.ones(1, 4)), rebuilt.lin(torch.ones(1, 4)))


def test_train_mode_gradients_deep_copies_and_the_loop() -> None:
    model = _net().train()
    ir = torch2ir.convert(model, (X,))
    rebuilt = ir2torch.convert(ir, model.state_dict()).train()
    model(X).square().sum().backward()
    rebuilt(X).square().sum().backward()
    grads = dict(model.named_parameters())
    assert all(torch.equal(p.grad, grads[n].grad) for n, p in rebuilt.named_parameters())
    twin = copy.deepcopy(rebuilt)
    assert isinstance(twin.lin, nn.Linear) and isinstance(twin.seq, nn.Sequential) and twin.lin.in_features == 4
    assert torch.equal(twin(X), rebuilt(X))
    assert torch2ir.convert(rebuilt.eval(), (X,)) == torch2ir.convert(model.eval(), (X,))


def test_a_pass_targeting_nn_linear_finds_the_rebuilt_subclass() -> None:
    """What the issue's quantization and override passes do: find every ``nn.Linear`` by ``isinstance``."""
    model = _net().eval()
    rebuilt = ir2torch.convert(torch2ir.convert(model, (X,)), model.state_dict())
    want = sorted(p for p, m in model.named_modules() if isinstance(m, nn.Linear))
    assert sorted(p for p, m in rebuilt.named_modules() if isinstance(m, nn.Linear)) == want


def test_llama4_router_is_a_linear() -> None:
    from transformers import Llama4TextConfig
    from transformers.models.llama4.modeling_llama4 import Llama4Router

    config = Llama4TextConfig(hidden_size=16, num_local_experts=4, num_experts_per_tok=1)
    torch.manual_seed(0)
    router = Llama4Router(config).eval()
    x = torch.randn(6, 16)
    allow = ["aten::scatter_.src"]  # the router's top-k scatter, outside the default operator surface
    rebuilt = ir2torch.convert(torch2ir.convert(router, (x,), allow=allow), router.state_dict(), allow=allow)
    assert isinstance(rebuilt, nn.Linear) and rebuilt.bias is None and rebuilt.out_features == 4
    for want, got in zip(router(x), rebuilt(x), strict=True):
        assert torch.equal(got, want)


HOSTILE = [
    "__import__('os')", 7, [], {"type": "linear"}, {"type": "linear", "data": {}, "more": 1},
    {"type": "opaque", "data": {"class": "os.system", "attributes": {}}}, {"type": "owned", "data": {}},
    {"type": "module", "data": {}}, {"type": "os.system", "data": {}}, {"type": ["linear"], "data": {}},
    {"type": "linear", "data": []}, {"type": "linear", "data": {"in_features": 4}},
    {"type": "linear", "data": {"in_features": 4, "out_features": 5, "bias": True, "device": "cuda"}},
    {"type": "linear", "data": {"in_features": 3, "out_features": 5, "bias": True}},  # another weight shape
    {"type": "linear", "data": {"in_features": 4, "out_features": 5, "bias": True, "dtype": "float64"}},
    {"type": "conv2d", "data": {"in_channels": 4, "out_channels": 5, "kernel_size": 1}},
    {"type": "linear", "data": {"in_features": 10**12, "out_features": 10**12, "bias": True}},
]


@pytest.mark.parametrize("value", HOSTILE, ids=range(len(HOSTILE)))
def test_a_hostile_base_is_an_ir_error_and_runs_nothing(value: object, tmp_path: Path) -> None:
    model = _net().eval()
    path = tmp_path / "hostile.ir.json"
    torch2ir.convert(model, (X,)).save(path)
    data = json.loads(path.read_text())
    data["implementations"]["lin"]["meta"][BASE_KEY] = value
    path.write_text(json.dumps(data))
    before = set(sys.modules)
    with pytest.raises(IRError, match="base|device"):
        ir2torch.convert(IR.load(path), model.state_dict())
    assert not {m for m in set(sys.modules) - before if not m.startswith("encodings.")}  # nothing imported


def test_without_the_record_the_module_is_a_plain_one(tmp_path: Path) -> None:
    """An IR written before the record (or with it removed) rebuilds as before: a plain module, outputs exact."""
    model = _net().eval()
    ir = torch2ir.convert(model, (X,))
    for impl in ir.values():
        impl.meta.pop(BASE_KEY, None)
    rebuilt = ir2torch.convert(ir, model.state_dict())
    assert not isinstance(rebuilt.lin, nn.Linear) and torch.equal(rebuilt(X), model(X))

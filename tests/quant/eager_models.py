"""Eager torch.ao quantization models of the quantization tests, and the checks they share."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.ao import quantization as tq

from common.quant import qconfig_to_data
from tests.helpers import max_abs_diff


class ConvNet(nn.Module):
    """QuantStub, Conv-BN-ReLU, Conv-BN, Conv-ReLU, a plain conv, a sigmoid, Linear-ReLU, Linear, DeQuantStub."""

    def __init__(self) -> None:
        super().__init__()
        self.quant = tq.QuantStub()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(4, 4, 1)
        self.bn2 = nn.BatchNorm2d(4)
        self.conv3 = nn.Conv2d(4, 4, 1)
        self.relu3 = nn.ReLU()
        self.conv4 = nn.Conv2d(4, 4, 1, bias=False)
        self.lin = nn.Linear(4, 6)
        self.relu4 = nn.ReLU()
        self.head = nn.Linear(6, 5)
        self.dequant = tq.DeQuantStub()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.bn(self.conv(self.quant(x))))
        y = self.relu3(self.conv3(self.bn2(self.conv2(y))))
        y = self.conv4(y).mean((2, 3))
        return self.dequant(self.head(self.relu4(self.lin(y))))


FUSE = [["conv", "bn", "relu"], ["conv2", "bn2"], ["conv3", "relu3"], ["lin", "relu4"]]


def qat_model(qconfig: Any, seed: int = 0) -> nn.Module:
    """:class:`ConvNet` fused and prepared for QAT with ``qconfig``, after two training steps."""
    torch.manual_seed(seed)
    model = ConvNet().train()
    model.qconfig = qconfig
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation and reduce_range warnings
        model = tq.fuse_modules_qat(model, FUSE)
        tq.prepare_qat(model, inplace=True)
    for _ in range(2):
        model(torch.randn(4, 3, 8, 8))
    return model


def ptq_model(qconfig: Any) -> nn.Module:
    """:class:`ConvNet` in eval mode, fused and prepared for post-training quantization, calibrated."""
    torch.manual_seed(0)
    model = ConvNet().eval()
    model.qconfig = qconfig
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = tq.fuse_modules(model, FUSE)
        tq.prepare(model, inplace=True)
    for _ in range(2):
        model(torch.randn(4, 3, 8, 8))
    return model


def plain_attributes(module: nn.Module) -> dict[str, Any]:
    """Attributes of ``module`` besides tensors and submodules, the qconfig as data, the hooks by name."""
    out = {k: v for k, v in vars(module).items() if not k.startswith("_") and k != "qconfig"}
    if getattr(module, "qconfig", None) is not None:
        out["qconfig"] = qconfig_to_data(module.qconfig)
    out["hooks"] = [h.__name__ for h in (*module._forward_pre_hooks.values(), *module._forward_hooks.values())]
    return out


def assert_same_modules(a: nn.Module, b: nn.Module) -> None:
    """Same paths, classes (root aside), plain attributes, hooks, qconfigs and state (values and dtypes)."""
    mods_a, mods_b = dict(a.named_modules()), dict(b.named_modules())
    assert list(mods_a) == list(mods_b)
    for path, ma in mods_a.items():
        mb = mods_b[path]
        if path:
            assert type(ma) is type(mb), path
        attrs_a, attrs_b = plain_attributes(ma), plain_attributes(mb)
        if not path:
            attrs_a, attrs_b = attrs_a.get("qconfig"), attrs_b.get("qconfig")
        assert attrs_a == attrs_b, path
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for key, value in sa.items():
        assert value.dtype == sb[key].dtype and torch.equal(value, sb[key]), key


def step(a: nn.Module, b: nn.Module, x: torch.Tensor) -> float:
    """One forward pass of each from the same seed; the outputs' max abs diff."""
    torch.manual_seed(3)
    out_a = a(x)
    torch.manual_seed(3)
    return max_abs_diff(out_a, b(x))


def converted_pair(a: nn.Module, b: nn.Module) -> tuple[nn.Module, nn.Module]:
    """``torch.ao.quantization.convert`` of eval-mode copies of both."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tq.convert(copy.deepcopy(a).eval()), tq.convert(copy.deepcopy(b).eval())


QCONFIGS: dict[str, Callable[[], Any]] = {
    "x86_fused": lambda: tq.get_default_qat_qconfig("x86"),
    "fakequantize_v0": lambda: tq.get_default_qat_qconfig("fbgemm", version=0),
    "per_channel_fakequantize": lambda: tq.QConfig(
        activation=tq.FakeQuantize.with_args(observer=tq.MovingAverageMinMaxObserver, quant_min=0, quant_max=255,
                                             averaging_constant=0.05),
        weight=tq.FakeQuantize.with_args(observer=tq.MovingAveragePerChannelMinMaxObserver, quant_min=-128,
                                         quant_max=127, dtype=torch.qint8, qscheme=torch.per_channel_symmetric,
                                         ch_axis=0)),
}

"""Module hooks: carried into the IR (the rebuild computes the hooked outputs) or refused by name."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn

import torch2ir
from common.errors import ConversionError
from common.testing.roundtrip import assert_roundtrip
from tests.helpers import max_abs_diff


class LinAct(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.lin(x))


class Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = LinAct()
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(x))


def _double(module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
    return output * 2


def _x() -> torch.Tensor:
    return torch.randn(3, 4, generator=torch.Generator().manual_seed(0))


def _no_hooks_diff(model: nn.Module, x: torch.Tensor) -> float:
    """How far the model's hooked output is from the same model without hooks (the test would prove nothing
    if the hook did not change the output)."""
    bare = copy.deepcopy(model)
    for m in bare.modules():
        m._forward_hooks.clear()
        m._forward_pre_hooks.clear()
    return max_abs_diff(model(x), bare(x))


def test_output_doubling_forward_hook_on_a_handled_linear_is_carried() -> None:
    torch.manual_seed(0)
    model = LinAct().eval()
    model.lin.register_forward_hook(_double)
    assert _no_hooks_diff(model, _x()) > 0.1
    ir, rebuilt, report = assert_roundtrip(model, (_x(),), atol=0, rtol=0)
    assert report.max_abs_diff == 0.0
    assert type(rebuilt.lin) is nn.Linear and not rebuilt.lin._forward_hooks
    mul = [a for _, a in ir["root"].graph.nodes(data=True) if a.get("implementation") == "aten.mul.Tensor"]
    assert len(mul) == 1 and mul[0]["args"][1] == 2  # the hook's op sits in the caller's graph


def test_pre_hook_on_a_non_leaf_module_is_carried() -> None:
    torch.manual_seed(0)
    model = Outer().eval()
    model.block.register_forward_pre_hook(lambda mod, args: (args[0] * 3 + 1,))
    assert _no_hooks_diff(model, _x()) > 0.1
    _, _, report = assert_roundtrip(model, (_x(),), atol=0, rtol=0)
    assert report.max_abs_diff == 0.0


def test_with_kwargs_and_always_call_hooks_are_carried() -> None:
    torch.manual_seed(0)
    model = Outer().eval()

    def pre(mod: nn.Module, args: tuple, kwargs: dict) -> tuple:
        return (args[0] - 0.5,), kwargs

    def post(mod: nn.Module, args: tuple, kwargs: dict, out: torch.Tensor) -> torch.Tensor:
        return out + args[0].sum(-1, keepdim=True)

    model.block.lin.register_forward_pre_hook(pre, with_kwargs=True)
    model.block.lin.register_forward_hook(post, with_kwargs=True, always_call=True)
    model.register_forward_hook(lambda mod, args, out: out.tanh(), always_call=True)
    assert _no_hooks_diff(model, _x()) > 0.1
    _, _, report = assert_roundtrip(model, (_x(),), atol=0, rtol=0)
    assert report.max_abs_diff == 0.0


def test_hooks_in_train_mode_and_on_a_leaf_called_twice() -> None:
    torch.manual_seed(0)

    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = nn.LayerNorm(4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.norm(self.norm(x) + x)

    model = Twice().train()
    model.norm.register_forward_hook(lambda mod, args, out: out + args[0])
    _, _, report = assert_roundtrip(model, (_x(),), atol=0, rtol=0)
    assert report.max_abs_diff == 0.0


def test_global_hooks_are_refused_by_name() -> None:
    def global_scale(mod: nn.Module, args: tuple, out: torch.Tensor) -> None:
        return None

    handle = nn.modules.module.register_module_forward_hook(global_scale)
    try:
        with pytest.raises(ConversionError, match=r"global module hook.*global_scale") as err:
            torch2ir.convert(LinAct(), (_x(),))
    finally:
        handle.remove()
    assert "_global_forward_hooks" in str(err.value)
    handle = nn.modules.module.register_module_forward_pre_hook(lambda mod, args: None)
    try:
        with pytest.raises(ConversionError, match=r"_global_forward_pre_hooks.*<lambda>"):
            torch2ir.convert(LinAct(), (_x(),))
    finally:
        handle.remove()


def test_backward_hooks_are_refused_by_module_and_name() -> None:
    model = Outer()

    def grad_clip(mod: nn.Module, grad_in: tuple, grad_out: tuple) -> None:
        return None

    model.block.register_full_backward_hook(grad_clip)
    with pytest.raises(ConversionError, match=r"block: backward hook\(s\) .*grad_clip") as err:
        torch2ir.convert(model, (_x(),))
    assert err.value.implementation == "block"


def test_old_weight_norm_is_refused_with_the_replacement() -> None:
    model = LinAct()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        torch.nn.utils.weight_norm(model.lin)
    with pytest.raises(ConversionError, match=r"lin: old-style torch.nn.utils.weight_norm") as err:
        torch2ir.convert(model, (_x(),))
    assert "parametrizations.weight_norm" in str(err.value) and "remove_weight_norm" in str(err.value)
    torch.nn.utils.remove_weight_norm(model.lin)
    ir = torch2ir.convert(model, (_x(),))
    assert ir["lin"].type == "linear" and set(ir["lin"].state) == {"weight", "bias"}


def test_new_weight_norm_round_trips() -> None:
    model = LinAct().eval()
    torch.nn.utils.parametrizations.weight_norm(model.lin)
    _, _, report = assert_roundtrip(model, (_x(),), atol=0, rtol=0)
    assert report.max_abs_diff == 0.0


def test_hook_inside_a_handled_module_is_refused() -> None:
    class WithAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = nn.MultiheadAttention(4, 2, batch_first=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.attn(x, x, x)[0]

    model = WithAttention()
    model.attn.out_proj.register_forward_hook(_double)
    with pytest.raises(ConversionError, match=r"attn.out_proj: forward hook\(s\) .*_double.*inside handled"):
        torch2ir.convert(model, (torch.randn(2, 3, 4),))
    model = WithAttention()
    model.attn.register_forward_hook(lambda mod, args, out: out)
    with pytest.raises(ConversionError, match=r"attn: forward hook\(s\) .*<lambda> on handled MultiheadAttention"):
        torch2ir.convert(model, (torch.randn(2, 3, 4),))


def test_hook_on_a_whole_model_leaf_is_refused() -> None:
    model = nn.Linear(4, 4)
    model.register_forward_hook(_double)
    with pytest.raises(ConversionError, match=r"root: forward hook\(s\) .*_double on the whole model"):
        torch2ir.convert(model, (_x(),))


@pytest.mark.filterwarnings("ignore:The tensor attribute:UserWarning")
def test_a_hook_that_feeds_the_leaf_an_attribute_is_refused() -> None:
    model = LinAct()

    def swap_weight(mod: nn.Module, args: tuple) -> None:
        mod.scaled = mod.weight * 2  # not read by Linear.forward: harmless
        return None

    model.lin.register_forward_pre_hook(swap_weight)
    assert_roundtrip(model.eval(), (_x(),))

    class Scaled(nn.Linear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return nn.functional.linear(x, self.scaled, self.bias)

    Scaled.__module__ = "torch.nn.modules.scaled"  # a one-argument torch.nn class: no preserved signature
    conv = torch2ir.get_default_converter()
    conv.register(Scaled, lambda m: {"in_features": m.in_features, "out_features": m.out_features})
    model = nn.Sequential(Scaled(4, 4), nn.ReLU())
    model[0].register_forward_pre_hook(swap_weight)
    with pytest.raises(ConversionError, match=r"0: forward hook\(s\) .*swap_weight of Scaled feed it 2 values"):
        conv.convert(model, (_x(),))


class SmallQat(nn.Module):
    """Conv / ReLU / LayerNorm / Linear, unfused: eager QAT puts the norm's fake-quantize in a forward hook."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.relu = nn.ReLU()
        self.norm = nn.LayerNorm(4)
        self.lin = nn.Linear(4, 5)
        self.relu2 = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.conv(x)).mean((2, 3))
        return self.relu2(self.lin(self.norm(y)))


def _qat_model() -> nn.Module:
    from torch.ao.quantization import get_default_qat_qconfig, prepare_qat

    torch.manual_seed(0)
    model = SmallQat().train()
    model.qconfig = get_default_qat_qconfig("x86")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation and reduce_range warnings
        prepare_qat(model, inplace=True)
    model(torch.randn(2, 3, 6, 6))  # observers have seen data: scales are not the initial 1.0
    return model


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_eager_qat_with_unfused_norm_round_trips_exactly(mode: str) -> None:
    from torch.ao.quantization.quantize import _observer_forward_hook

    model = _qat_model().train(mode == "train")
    assert list(model.norm._forward_hooks.values()) == [_observer_forward_hook]
    x = torch.randn(2, 3, 6, 6, generator=torch.Generator().manual_seed(1))
    bare = copy.deepcopy(model)
    bare.norm._forward_hooks.clear()
    assert max_abs_diff(copy.deepcopy(model)(x), bare(x)) > 0.0  # the hooked fake-quantize matters
    ir, rebuilt, report = assert_roundtrip(model, (x,), atol=0, rtol=0)
    assert report.max_abs_diff == 0.0
    # torch.ao's observer hook is carried on the leaf itself (meta), as prepare registered it, so that
    # torch.ao.quantization.convert sees it on the rebuild too (tests/quant)
    calls = [a.get("implementation") for _, a in ir["root"].graph.nodes(data=True)]
    assert "norm.activation_post_process" not in calls and calls.index("norm") < calls.index("lin")
    assert ir["norm"].meta["observer_hook"] == "forward"
    assert type(rebuilt.norm) is nn.LayerNorm
    assert list(rebuilt.norm._forward_hooks.values()) == [_observer_forward_hook]
    # the observers were updated alike by that step: a second step stays exact
    assert max_abs_diff(model(x), rebuilt(x)) == 0.0
    assert all(torch.equal(v, rebuilt.state_dict()[k]) for k, v in model.state_dict().items())

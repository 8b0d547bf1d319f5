"""A module given an ``OrderedDict`` (torchvision's segmentation heads), and errors that never print tensors.

torchvision's ``IntermediateLayerGetter`` returns an ``OrderedDict`` of features in the order of its
``return_layers`` (``{"low": ..., "high": ...}``: not sorted) and ``LRASPPHead.forward(input: Dict[str, Tensor])``
reads it. The IR held the ``OrderedDict`` in memory, but fx turned it into a plain dict in the parent's generated
code, and a saved IR read it back as a plain dict; the head's binding then refused the call with an error printing
both tensors. The IR now carries the type (``{"$ordered_dict": [...]}`` in files), the rebuilt parent builds it, and
a structure mismatch is an ``InputMismatchError`` showing structures only. No ``IRError`` message shows a tensor.
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import ir2torch
import torch2ir
from common import IR
from common.errors import ExecutionError, InputMismatchError, IRSerializationError, without_values
from common.values import decode, encode, values_equal
from tests.helpers import max_abs_diff


class _IntermediateLayerGetter(nn.ModuleDict):
    """torchvision.models._utils.IntermediateLayerGetter, by hand."""

    def __init__(self, model: nn.Module, return_layers: dict[str, str]) -> None:
        layers = OrderedDict()
        wanted = dict(return_layers)
        for name, module in model.named_children():
            layers[name] = module
            wanted.pop(name, None)
            if not wanted:
                break
        super().__init__(layers)
        self.return_layers = return_layers

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        out = OrderedDict()
        for name, module in self.items():
            x = module(x)
            if name in self.return_layers:
                out[self.return_layers[name]] = x
        return out


class _LRASPPHead(nn.Module):
    """torchvision.models.segmentation.lraspp.LRASPPHead, by hand (small)."""

    def __init__(self, low: int, high: int, classes: int, inter: int) -> None:
        super().__init__()
        self.cbr = nn.Sequential(nn.Conv2d(high, inter, 1, bias=False), nn.BatchNorm2d(inter), nn.ReLU(inplace=True))
        self.scale = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(high, inter, 1, bias=False), nn.Sigmoid())
        self.low_classifier = nn.Conv2d(low, classes, 1)
        self.high_classifier = nn.Conv2d(inter, classes, 1)

    def forward(self, input: dict[str, torch.Tensor]) -> torch.Tensor:
        low = input["low"]
        high = input["high"]
        x = self.cbr(high)
        s = self.scale(high)
        x = x * s
        x = F.interpolate(x, size=low.shape[-2:], mode="bilinear", align_corners=False)
        return self.low_classifier(low) + self.high_classifier(x)


class _LRASPP(nn.Module):
    """torchvision.models.segmentation.lraspp.LRASPP, by hand."""

    def __init__(self) -> None:
        super().__init__()
        trunk = nn.Sequential(nn.Conv2d(3, 4, 3, 2, 1), nn.ReLU(), nn.Conv2d(4, 6, 3, 2, 1), nn.ReLU())
        self.backbone = _IntermediateLayerGetter(trunk, return_layers={"1": "low", "3": "high"})
        self.classifier = _LRASPPHead(4, 6, 3, 8)

    def forward(self, input: torch.Tensor) -> dict[str, torch.Tensor]:
        features = self.backbone(input)
        out = self.classifier(features)
        out = F.interpolate(out, size=input.shape[-2:], mode="bilinear", align_corners=False)
        result = OrderedDict()
        result["out"] = out
        return result


@pytest.mark.parametrize("reload", [False, True])
def test_a_head_given_an_ordered_dict_runs_as_the_original(tmp_path, reload: bool) -> None:
    torch.manual_seed(0)
    model = _LRASPP().eval()
    x = torch.randn(2, 3, 16, 16)
    ir = torch2ir.convert(model, (x,))
    if reload:
        loaded = IR.load(ir.save(tmp_path / "m.json"))
        assert loaded == ir
        assert '"$ordered_dict"' in (tmp_path / "m.json").read_text()
        ir = loaded
    rebuilt = ir2torch.convert(ir, model.state_dict())
    with torch.no_grad():
        assert max_abs_diff(rebuilt(x), model(x)) == 0
        features = model.backbone(x)
        assert type(rebuilt.backbone(x)) is OrderedDict
        assert max_abs_diff(rebuilt.classifier(features), model.classifier(features)) == 0


def test_a_dict_where_an_ordered_dict_was_converted_is_refused_without_values() -> None:
    torch.manual_seed(0)
    model = _LRASPP().eval()
    x = torch.randn(2, 3, 16, 16)
    rebuilt = ir2torch.convert(torch2ir.convert(model, (x,)), model.state_dict())
    features = model.backbone(x)
    for given in (dict(features), OrderedDict(reversed(list(features.items())))):
        with pytest.raises(InputMismatchError) as info:
            rebuilt.classifier(given)
        text = str(info.value)
        assert info.value.key == "input" and "OrderedDict{'low': *, 'high': *}" in text
        assert "tensor" not in text and f"{float(features['low'].flatten()[0]):.4f}" not in text


class _Pairs(nn.Module):
    def forward(self, xs: list, y: torch.Tensor) -> torch.Tensor:
        return torch.cat([a for pair in xs for a in pair], 0) + y


class _PairsParent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pairs = _Pairs()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pairs([(x, x * 2), (x + 1,)], x.sum())


def test_a_nested_list_of_another_length_is_refused_not_cut() -> None:
    """fx's flattening read the traced number of items of a nested list and dropped the rest."""
    model = _PairsParent().eval()
    x = torch.randn(3)
    rebuilt = ir2torch.convert(torch2ir.convert(model, (x,)), model.state_dict())
    assert max_abs_diff(rebuilt(x), model(x)) == 0
    y = x.sum()
    assert model.pairs([(x, x), (x,), (x,)], y).shape == (12,)
    for items in ([(x, x), (x,), (x,)], [(x, x), (x, x)], [(x, x)]):
        with pytest.raises(InputMismatchError, match=r"converted with \[\(\*, \*\), \(\*,\)\]") as info:
            rebuilt.pairs(items, y)
        assert info.value.key == "xs"
    assert max_abs_diff(rebuilt.pairs(((x, x), [x + 1]), y), model.pairs(((x, x), [x + 1]), y)) == 0


def test_ordered_dicts_keep_their_type_in_files_and_other_dict_types_are_refused() -> None:
    value = [OrderedDict([("low", 1), ("high", (2, 3))]), {"a": 1}, OrderedDict([(1, "x")])]
    back = decode(encode(value))
    assert [type(v) for v in back] == [OrderedDict, dict, OrderedDict] and values_equal(back, value)
    assert not values_equal(OrderedDict(a=1), {"a": 1})

    class MyDict(dict):
        pass

    for other in (MyDict(a=1), defaultdict(int, a=1)):
        with pytest.raises(IRSerializationError, match="cannot be stored"):
            encode([other])


def test_error_messages_never_show_tensor_values() -> None:
    t = torch.tensor([[0.123456, 7.654321]], requires_grad=True) * 3
    error = ExecutionError(f"object {{'low': {t!r}}} differs; f(x) = [1]", hint=repr(nn.Parameter(torch.ones(2))))
    text = str(error)
    assert "0.3704" not in text and "tensor(...)" in text and "f(x) = [1]" in text and "grad_fn" not in text
    assert without_values("cut tensor([[1., 2.], [3") == "cut tensor(...)"
    assert without_values("scalar_tensor(x) and FakeTensor(...)") == "scalar_tensor(x) and FakeTensor(...)"


class _Values(nn.Module):
    """Iterates its dict: the result depends on the keys' order, which the graph fixed at conversion."""

    def forward(self, features: dict) -> torch.Tensor:
        return torch.cat(list(features.values()))


class _ValuesParent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = _Values()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head({"a": x, "b": x + 1})


def test_a_plain_dict_with_its_keys_in_another_order_is_refused_not_reordered() -> None:
    """Eager ``torch.cat(list(d.values()))`` follows the order it is given; the graph computes in the converted one
    (``torch.export``'s own module silently gives the converted order's result). A plain dict in another order is
    refused, at the root and at a submodule, naming the argument; in the converted order it runs exactly."""
    x, y = torch.zeros(2), torch.ones(2)
    model = _Values()
    rebuilt = ir2torch.convert(torch2ir.convert(model, ({"a": x, "b": y},)), model.state_dict())
    assert torch.equal(rebuilt({"a": x, "b": y}), model({"a": x, "b": y}))
    assert not torch.equal(model({"b": y, "a": x}), model({"a": x, "b": y}))  # the order changes eager's result
    with pytest.raises(InputMismatchError, match="keys come in another order") as info:
        rebuilt({"b": y, "a": x})
    assert info.value.key == "features" and "{'b': *, 'a': *}" in str(info.value)
    parent = _ValuesParent()
    rebuilt_parent = ir2torch.convert(torch2ir.convert(parent, (x,)), parent.state_dict())
    assert torch.equal(rebuilt_parent(x), parent(x))
    assert torch.equal(rebuilt_parent.head({"a": x, "b": x + 1}), parent.head({"a": x, "b": x + 1}))
    with pytest.raises(InputMismatchError, match="keys come in another order") as info:
        rebuilt_parent.head({"b": x + 1, "a": x})
    assert info.value.key == "features"

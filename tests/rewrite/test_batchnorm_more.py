"""fold_batchnorm beyond a Conv/Linear leaf in the same graph: ConvTranspose (groups 1 and > 1), nn.Conv2d
subclasses rebuilt from their graphs, a Linear through a reshape, a layer and a BatchNorm in different modules.
Each result is compared with the eval-mode PyTorch model, loaded with strict=True and round-tripped through JSON."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import ir2torch
import torch2ir
from common.ir import IR
from common.rewrite import fold_batchnorm
from common.state_dict import save_safetensors
from tests.rewrite.helpers import randomize_batchnorms

BN = {1: nn.BatchNorm1d, 2: nn.BatchNorm2d, 3: nn.BatchNorm3d}


def folded(model: nn.Module, x: torch.Tensor, tmp_path, count: int):
    """Fold, check the count, outputs within 1e-5 (strict loading), and the JSON round trip; the result."""
    randomize_batchnorms(model)
    model.eval()
    result = fold_batchnorm(torch2ir.convert(model, (x,)), model.state_dict())
    assert result.count == count, (result.changes, result.skipped)
    rebuilt = ir2torch.convert(result.ir, result.state)  # strict=True
    with torch.no_grad():
        expected, got = model(x), rebuilt(x)
    assert (got - expected).abs().max() < 1e-5
    result.ir.save(tmp_path / "f.ir.json")
    save_safetensors(result.state, tmp_path / "f.safetensors")
    loaded = IR.load(tmp_path / "f.ir.json")
    assert loaded == result.ir
    with torch.no_grad():
        assert torch.equal(ir2torch.convert(loaded, tmp_path / "f.safetensors")(x), got)
    return result


@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("groups, bias", [(1, True), (2, False), (2, True)])
def test_conv_transpose_then_batch_norm(dim, groups, bias, tmp_path):
    transposed = {1: nn.ConvTranspose1d, 2: nn.ConvTranspose2d, 3: nn.ConvTranspose3d}[dim]
    model = nn.Sequential(transposed(4, 6, 3, stride=2, groups=groups, bias=bias), BN[dim](6), nn.ReLU())
    x = torch.randn(2, 4, *([5] * dim))
    result = folded(model, x, tmp_path, 1)
    assert result.ir["0"].data["bias"] is True and "1" not in result.ir
    assert result.changes == [f"0: convtranspose{dim}d + batchnorm{dim}d -> convtranspose{dim}d"]


class SubConv(nn.Conv2d):
    """An nn.Conv2d subclass: torch2ir records it as a "module" rebuilt from its graph."""


class PaddedConv(nn.Conv2d):
    """A subclass padding in its own forward (TensorFlow-style 'same' padding)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(F.pad(x, (0, 1, 0, 1)))


class ConvRelu(nn.Conv2d):
    """A subclass computing more than a convolution: its batch norm cannot be folded into it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(super().forward(x))


@pytest.mark.parametrize("make", [
    lambda: SubConv(4, 4, 3, padding="same", groups=4, bias=False),
    lambda: SubConv(4, 4, 3, stride=2, bias=True),
    lambda: SubConv(4, 4, 3, padding=1, padding_mode="reflect", bias=False),
    lambda: PaddedConv(4, 4, 3, stride=2, groups=2, bias=False),
])
def test_conv_subclass_then_batch_norm(make, tmp_path):
    model = nn.Sequential(make(), nn.BatchNorm2d(4), nn.SiLU())
    x = torch.randn(2, 4, 9, 9)
    result = folded(model, x, tmp_path, 1)
    conv = result.ir["0"]
    assert conv.type == "module" and "bias" in conv.state and "1" not in result.ir
    assert [r["key"] for r in conv.meta["provenance"][0]["from"]] == ["0", "1"]
    assert set(result.state) == {"0.weight", "0.bias"}


def test_a_subclass_doing_more_than_a_convolution_is_skipped(tmp_path):
    model = nn.Sequential(ConvRelu(4, 4, 3), nn.BatchNorm2d(4))
    result = folded(model, torch.randn(2, 4, 9, 9), tmp_path, 0)
    assert result.skipped == ["1: follows module, not a Conv, ConvTranspose or Linear (nor a module computing one "
                              "convolution, nor a Linear through a reshape)"]


class Flattened(nn.Module):
    """LeViT's MLPLayerWithBN: Linear, flatten(0, 1), BatchNorm1d, reshape_as the Linear's output."""

    def __init__(self, reshape: str) -> None:
        super().__init__()
        self.linear, self.bn, self.reshape = nn.Linear(8, 6), nn.BatchNorm1d(6), reshape

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        flat = y.flatten(0, 1) if self.reshape == "flatten" else y.reshape(-1, 6)
        return self.bn(flat).reshape_as(y)


@pytest.mark.parametrize("reshape", ["flatten", "reshape"])
def test_linear_reshape_batch_norm(reshape, tmp_path):
    result = folded(Flattened(reshape), torch.randn(2, 5, 8), tmp_path, 1)
    assert result.changes == ["linear: linear + batchnorm1d -> linear (through a reshape)"]


class EndsWithConv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(torch.relu(x))


class StartsWithBn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.bn(x))


class Across(nn.Module):
    """``shape``: "parent" (the BN in the parent), "sibling" (the first op of a sibling) or "shared" (the conv's
    output is also read elsewhere, so the BN stays)."""

    def __init__(self, shape: str) -> None:
        super().__init__()
        self.shape, self.a = shape, EndsWithConv()
        self.b = nn.BatchNorm2d(4) if shape != "sibling" else StartsWithBn()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.a(x)
        return self.b(y) + y.mean() if self.shape == "shared" else self.b(y)


@pytest.mark.parametrize("shape, bn", [("parent", "b"), ("sibling", "b.bn")])
def test_batch_norm_in_another_module(shape, bn, tmp_path):
    result = folded(Across(shape), torch.randn(2, 3, 8, 8), tmp_path, 1)
    assert result.changes == ["a.conv: conv2d + batchnorm2d -> conv2d (across modules)"]
    assert bn not in result.ir and result.ir["a.conv"].meta["provenance"][0]["from"][1]["key"] == bn


def test_batch_norm_in_another_module_with_a_shared_input_is_skipped(tmp_path):
    result = folded(Across("shared"), torch.randn(2, 3, 8, 8), tmp_path, 0)
    assert result.skipped == ["a.conv -> b: the layer's output has other consumers"]

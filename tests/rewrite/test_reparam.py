"""reparameterize on hand-written RepVGG / MobileOne blocks: the branches merge into one convolution whose rebuild
computes what the original model computes (eval mode), and what cannot merge exactly is left and said."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common.compare import equal
from common.rewrite import RewriteError, reparameterize
from tests.rewrite.helpers import randomize_batchnorms


class Rep(nn.Module):
    """RepVGG's block: 3x3 conv + BN, 1x1 conv + BN, identity BN, summed, then ReLU."""

    def __init__(self, c: int = 8, groups: int = 1, stride: int = 1, dims: int = 2) -> None:
        super().__init__()
        conv, bn = (nn.Conv1d, nn.BatchNorm1d) if dims == 1 else (nn.Conv2d, nn.BatchNorm2d)
        self.kxk = nn.Sequential(conv(c, c, 3, stride, 1, groups=groups, bias=False), bn(c))
        self.one = nn.Sequential(conv(c, c, 1, stride, 0, groups=groups, bias=True), bn(c))
        self.identity = bn(c) if stride == 1 else None

    def forward(self, x):
        out = self.kxk(x) + self.one(x)
        if self.identity is not None:
            out = out + self.identity(x)
        return torch.relu(out + 0.5)


def _check(model: nn.Module, x: torch.Tensor, merged: int):
    randomize_batchnorms(model)
    model.eval()
    ir = torch2ir.convert(model, (x,))
    result = reparameterize(ir, model.state_dict())
    assert result.count == merged, (result.changes, result.skipped)
    rebuilt = ir2torch.convert(*result)
    with torch.no_grad():
        want, got = model(x), rebuilt(x)
    assert float((want - got).abs().max()) <= 1e-5 * float(want.abs().max())
    return result, rebuilt


@pytest.mark.parametrize("groups", [1, 2, 8])
def test_repvgg_block_merges_into_one_conv(groups):
    torch.manual_seed(0)
    model, x = nn.Sequential(Rep(8, groups), Rep(8, groups, stride=2)), torch.randn(2, 8, 10, 10)
    result, rebuilt = _check(model, x, 2)
    convs = [m for m in rebuilt.modules() if isinstance(m, nn.Conv2d)]
    assert [(c.kernel_size, c.padding, c.stride, c.groups) for c in convs] == \
        [((3, 3), (1, 1), (1, 1), groups), ((3, 3), (1, 1), (2, 2), groups)]
    assert not any(isinstance(m, nn.BatchNorm2d) for m in rebuilt.modules())
    # the merged call keeps the sum's shape and dtype, and the loop closes
    call = result.ir["0"].node("reparam_conv")
    assert call["meta"]["shape"] == [2, 8, 10, 10] and call["meta"]["dtype"] == torch.float32
    assert equal(torch2ir.convert(rebuilt, (x,)), result.ir, ignore=("provenance",))
    assert result.ir["0.reparam_conv"].meta["provenance"][-1]["pass"] == "reparameterize"


def test_conv1d_branches_and_float64():
    torch.manual_seed(0)
    model, x = Rep(6, dims=1).double(), torch.randn(2, 6, 12, dtype=torch.float64)
    _, rebuilt = _check(model, x, 1)
    assert rebuilt.reparam_conv.weight.dtype == torch.float64


class Shared(nn.Module):
    """A sum of branches whose 1x1 branch is also read elsewhere: merging would drop that value."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Conv2d(4, 4, 3, padding=1), nn.Conv2d(4, 4, 1)

    def forward(self, x):
        y = self.b(x)
        return self.a(x) + y, y


class Stacked(nn.Module):
    """A convolution of a convolution, summed with the input: not one convolution of it (with padding)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Conv2d(4, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        return self.b(self.a(x)) + x


class Uncentred(nn.Module):
    """A 1x1 branch with padding 1 beside a 3x3 with padding 1: their outputs differ in size, so never summed;
    here a 2x2 kernel (padding 0) beside a 3x3 (padding 1) would need a kernel off-centre."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Conv2d(4, 4, 3, padding=1), nn.Conv2d(4, 4, 2, padding=1)

    def forward(self, x):
        return self.a(x)[..., :5, :5] + self.b(x)[..., :5, :5]


def test_what_does_not_merge_exactly_is_left_and_said():
    x = torch.randn(1, 4, 6, 6)
    shared = torch2ir.convert(Shared().eval(), (x,))
    result = reparameterize(shared, Shared().state_dict())
    assert result.count == 0 and "is also read by" in result.skipped[0]
    for model in (Stacked().eval(), Uncentred().eval()):
        result = reparameterize(torch2ir.convert(model, (x,)), model.state_dict())
        assert result.count == 0 and result.ir == torch2ir.convert(model, (x,))
    with pytest.raises(RewriteError, match="no state"):
        reparameterize(shared, None)


def test_where_limits_the_graphs():
    torch.manual_seed(0)
    model, x = nn.Sequential(Rep(8), Rep(8)).eval(), torch.randn(1, 8, 6, 6)
    ir = torch2ir.convert(model, (x,))
    result = reparameterize(ir, model.state_dict(), where="1")
    assert result.count == 1 and "1.reparam_conv" in result.ir and "0.kxk" in result.ir
    rebuilt = ir2torch.convert(*result)
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(x), model(x), rtol=1e-5, atol=1e-5)


def test_fold_batchnorm_names_the_norms_it_does_not_fold():
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.GroupNorm(2, 8), nn.Conv2d(8, 8, 1), nn.InstanceNorm2d(8),
                          nn.Conv2d(8, 8, 1), nn.BatchNorm2d(8)).eval()
    randomize_batchnorms(model)
    x = torch.randn(1, 3, 8, 8)
    from common.rewrite import fold_batchnorm

    result = fold_batchnorm(torch2ir.convert(model, (x,)), model.state_dict())
    assert result.count == 1 and result.skipped == []
    assert [line.split(":")[0] for line in result.other_norms] == \
        ["1 (torch.nn.modules.normalization.GroupNorm)", "3 (torch.nn.modules.instancenorm.InstanceNorm2d)"]
    assert all("statistics of each input" in line for line in result.other_norms)


def test_a_model_on_meta_reparameterizes_to_meta_tensors():
    with torch.device("meta"):
        model = Rep(8).eval()
    ir = torch2ir.convert(model, (torch.randn(1, 8, 6, 6, device="meta"),))
    result = reparameterize(ir, model.state_dict())
    assert result.count == 1
    assert {k: (v.device.type, list(v.shape)) for k, v in result.state.items()} == \
        {"reparam_conv.weight": ("meta", [8, 8, 3, 3]), "reparam_conv.bias": ("meta", [8])}


class InPlace(nn.Module):
    """``x.add_(conv(x))`` changes ``x`` itself, read again after it: merging would lose that."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        x = x * 1.0
        y = x.add_(self.conv(x))
        return y + x


def test_an_in_place_sum_into_the_input_is_left():
    model, x = InPlace().eval(), torch.randn(1, 4, 5, 5)
    result = reparameterize(torch2ir.convert(model, (x,)), model.state_dict())
    assert result.count == 0

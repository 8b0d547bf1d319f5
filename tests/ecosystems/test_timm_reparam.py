"""reparameterize on timm's RepVGG and MobileOne (random weights and batch-norm statistics, no download): every
block's branches merge into one convolution, as many as timm's own ``reparameterize_model`` makes, the rebuild
computes the original's output within 1e-5 of its largest value, and the IR is the one timm's own reparameterized
model converts to (same modules, graphs and sizes; its weights equal to float rounding)."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common.compare import differences
from common.rewrite import reparameterize
from tests.rewrite.helpers import randomize_batchnorms

CASES = {"repvgg_a0": 22, "mobileone_s0": 43}


@pytest.mark.parametrize("name", sorted(CASES))
def test_timm_blocks_reparameterize_like_timm(timm, name):
    from timm.utils.model import reparameterize_model

    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False, num_classes=10).eval()
    randomize_batchnorms(model)
    x = torch.randn(2, 3, 64, 64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TrainModeWarning of the train-mode batch norms
        ir = torch2ir.convert(model, (x,))
    result = reparameterize(ir, model.state_dict())
    assert result.count == CASES[name] and not result.skipped
    rebuilt = ir2torch.convert(*result)
    own = reparameterize_model(copy.deepcopy(model)).eval()  # timm's new convs are in train mode
    with torch.no_grad():
        want, got, theirs = model(x), rebuilt(x), own(x)
    scale = float(want.abs().max())
    assert float((got - want).abs().max()) <= 1e-5 * scale
    assert float((theirs - want).abs().max()) <= 1e-5 * scale  # timm's own, for comparison
    assert sum(isinstance(m, nn.BatchNorm2d) for m in rebuilt.modules()) == 0
    assert sum(isinstance(m, nn.Conv2d) for m in rebuilt.modules()) == \
        sum(isinstance(m, nn.Conv2d) for m in own.modules())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs_ir = torch2ir.convert(own, (x,))
    # timm deletes the blocks' drop_path (an identity nothing calls, in the original too) and registers its
    # reparam_conv last in the block (the pass puts it where the branches were: "order"); the root's notes on the
    # original's train mode (its batch norms) stay with the rewritten IR (an eval-mode model); the rest is the same
    ignore = ("provenance", "train_trace", "train_buffers", "order")
    assert [d for d in differences(theirs_ir, result.ir, ignore=ignore)
            if not d.endswith(".drop_path (identity)")] == []
    for key, value in own.state_dict().items():
        torch.testing.assert_close(result.state[key], value, rtol=1e-5, atol=1e-5 * float(value.abs().max()))


def test_fold_batchnorm_names_timm_evonorms(timm):
    from timm.layers import EvoNorm2dB0, EvoNorm2dS0, GroupNormAct

    from common.rewrite import fold_batchnorm

    model = nn.Sequential(nn.Conv2d(3, 8, 3), EvoNorm2dB0(8), nn.Conv2d(8, 8, 3), EvoNorm2dS0(8, group_size=4),
                          nn.Conv2d(8, 8, 1), GroupNormAct(8, 2), nn.Conv2d(8, 8, 1), nn.BatchNorm2d(8)).eval()
    allow = ["aten::sqrt_.default", "aten::var.dim"]
    x = torch.randn(1, 3, 12, 12)
    result = fold_batchnorm(torch2ir.convert(model, (x,), allow=allow), model.state_dict(), allow=allow)
    assert result.count == 1
    assert [line.split(" ")[0] for line in result.other_norms] == ["1", "3", "5"]
    assert "EvoNorm2dB0): not folded: keeps running statistics (running_var)" in result.other_norms[0]
    assert "EvoNorm2dS0): not folded: normalizes with statistics of each input" in result.other_norms[1]
    assert "GroupNormAct" in result.other_norms[2]

"""``ir.lower()`` of a rewritten IR: the rewrite keeps the conversion's capture, which then refuses the changed IR
with a ``StaleCaptureError`` saying what to do (not a ``NoCaptureError`` claiming the IR came from a file); the
way it names, lowering the rebuilt model, gives the rewritten model's FlatIR."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common.capture import NoCaptureError
from common.ir import IR
from common.rewrite import fold_batchnorm, remove_types
from torch2ir.lowering.capture import StaleCaptureError


def _model() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()).eval()
    model[1].running_mean.uniform_(-1, 1)
    model[1].running_var.uniform_(0.5, 2)
    return model, torch.randn(1, 3, 8, 8)


def test_a_rewritten_ir_says_it_changed_and_the_rebuilt_model_lowers():
    model, x = _model()
    ir = torch2ir.convert(model, (x,))
    folded, state = fold_batchnorm(ir, model.state_dict())
    with pytest.raises(StaleCaptureError, match="changed after its conversion") as caught:
        folded.lower()
    assert "torch2ir.lower(ir2torch.convert(ir, state), args, kwargs)" in caught.value.hint
    rebuilt = ir2torch.convert(folded, state)
    flat = torch2ir.lower(rebuilt, (x,))
    assert "aten.batch_norm.default" not in [n.op_type for n in flat.nodes]  # the folded model, not the original
    executed = ir2torch.convert(flat, rebuilt.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(executed(x), model(x), atol=1e-5, rtol=0)
    assert ir.lower().nodes  # the IR as converted still lowers


def test_a_rewrite_that_changed_nothing_still_lowers_and_a_loaded_ir_has_no_capture(tmp_path):
    model, x = _model()
    ir = torch2ir.convert(model, (x,))
    same, _ = remove_types(ir, model.state_dict(), ["dropout"])
    assert same == ir
    assert same.lower() == ir.lower()
    ir.save(tmp_path / "m.ir.json")
    with pytest.raises(NoCaptureError, match="loaded from a file"):
        IR.load(tmp_path / "m.ir.json").lower()

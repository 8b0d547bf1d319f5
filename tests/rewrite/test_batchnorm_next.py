"""fold_batchnorm(..., into_next=True): a batch norm that follows no layer is folded into the Conv (no padding) or
Linear that reads it, weight scaled per input channel (per group), bias given the shift; padding refuses, named."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common.compare import equal
from common.rewrite import fold_batchnorm
from tests.rewrite.helpers import randomize_batchnorms


class Cat(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, x.flip(-1)], 1)


def _model(layer: nn.Module, norm: nn.Module, cat: bool = True) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(*([Cat()] if cat else []), norm, layer, nn.ReLU()).eval()
    randomize_batchnorms(model)
    return model


CASES = {
    "conv1x1": (lambda: _model(nn.Conv2d(6, 5, 1), nn.BatchNorm2d(6)), (2, 3, 8, 8)),
    "conv3x3 grouped, strided, no bias": (lambda: _model(nn.Conv2d(6, 4, 3, stride=2, groups=2, bias=False),
                                                         nn.BatchNorm2d(6)), (2, 3, 9, 9)),
    "conv1d": (lambda: _model(nn.Conv1d(6, 4, 2), nn.BatchNorm1d(6)), (2, 3, 7)),
    "linear": (lambda: _model(nn.Linear(6, 4), nn.BatchNorm1d(6)), (5, 3)),
    "no affine": (lambda: _model(nn.Conv2d(6, 5, 1), nn.BatchNorm2d(6, affine=False)), (2, 3, 8, 8)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_batch_norm_folds_into_the_layer_after_it(name):
    build, shape = CASES[name]
    model, x = build(), torch.randn(*shape)
    ir = torch2ir.convert(model, (x,))
    assert fold_batchnorm(ir, model.state_dict()).count == 0  # nothing before it: the default leaves it
    result = fold_batchnorm(ir, model.state_dict(), into_next=True)
    assert result.count == 1 and result.skipped == [], result.skipped
    assert "(the batch norm before it)" in result.changes[0]
    assert not any(impl.type.startswith("batchnorm") for impl in result.ir.values())
    rebuilt = ir2torch.convert(*result)
    torch.testing.assert_close(rebuilt(x), model(x), atol=1e-5, rtol=0)
    assert equal(torch2ir.convert(rebuilt, (x,)), result.ir, ignore=("provenance",))


def test_padding_or_an_activation_between_is_left_alone_with_why():
    model, x = _model(nn.Conv2d(6, 5, 3, padding=1), nn.BatchNorm2d(6)), torch.randn(2, 3, 8, 8)
    result = fold_batchnorm(torch2ir.convert(model, (x,)), model.state_dict(), into_next=True)
    assert result.count == 0 and len(result.skipped) == 1
    assert "pads its input" in result.skipped[0] and "(the layer after it)" in result.skipped[0]
    torch.manual_seed(0)
    act = nn.Sequential(Cat(), nn.BatchNorm2d(6), nn.ReLU(), nn.Conv2d(6, 5, 1)).eval()
    result = fold_batchnorm(torch2ir.convert(act, (x,)), act.state_dict(), into_next=True)
    assert result.count == 0 and len(result.skipped) == 1 and "follows" in result.skipped[0]


def test_a_batch_norm_after_a_layer_still_folds_backwards_first():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 6, 3), nn.BatchNorm2d(6), nn.Conv2d(6, 4, 1)).eval()
    randomize_batchnorms(model)
    x = torch.randn(2, 3, 8, 8)
    result = fold_batchnorm(torch2ir.convert(model, (x,)), model.state_dict(), into_next=True)
    assert result.changes == ["0: conv2d + batchnorm2d -> conv2d"]
    torch.testing.assert_close(ir2torch.convert(*result)(x), model(x), atol=1e-5, rtol=0)


def test_the_cli_option(tmp_path, capsys):
    from common.state_dict import save_safetensors
    from ir2torch.cli import main

    model, x = _model(nn.Conv2d(6, 5, 1), nn.BatchNorm2d(6)), torch.randn(2, 3, 8, 8)
    torch2ir.convert(model, (x,)).save(tmp_path / "in.ir.json")
    save_safetensors(model.state_dict(), tmp_path / "in.safetensors")
    common = ["rewrite", str(tmp_path / "in.ir.json"), "--pass", "fold-batchnorm", "--state",
              str(tmp_path / "in.safetensors"), "-o", str(tmp_path / "out.ir.json"), "--state-out",
              str(tmp_path / "out.safetensors"), "--verify", "-i", "2x3x8x8", "--strict"]
    assert main(common) == 1  # left alone without the option
    assert main([*common, "--into-next"]) == 0
    assert "fold-batchnorm: 1 change" in capsys.readouterr().out

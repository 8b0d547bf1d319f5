"""brevitas' bnn_pynq CNV and LFC (built by ``model_with_cfg`` from their shipped .ini files, random weights, no
download) and a network of brevitas.nn layers (QuantIdentity, QuantConv2d, QuantReLU, QuantLinear with 4-bit
weights and activations, a max pool and a batch norm between them) round-trip exactly: eval outputs exact, also
after a JSON save and load, and every one converts back to the same IR (fixpoint; CNV 1W1A and the LFCs did not
until node names stopped carrying export's model-wide counters: ``detach_5`` for ``detach_15``). Gradients (eval
mode) are exact too: brevitas' straight-through estimators are recorded as the ``torch2ir_ste`` operators
(common.ste_ops), each with the estimator's backward, and no CustomBackwardWarning is left to give.
CNV takes CIFAR's 1x3x32x32 (its unpadded convolutions and pools need it), LFC MNIST's 1x1x28x28.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from tests.ecosystems.roundtrip import assert_fixpoint, random_running_stats, round_trip
from torch2ir.frontend.custom_backward import CustomBackwardWarning

pytestmark = pytest.mark.filterwarnings("ignore::torch2ir.train.dropout.TrainModeWarning")


class QuantNet(nn.Module):
    """QuantIdentity -> QuantConv2d -> BatchNorm2d -> QuantReLU -> max pool -> QuantConv2d -> QuantReLU ->
    flatten -> QuantLinear."""

    def __init__(self) -> None:
        super().__init__()
        import brevitas.nn as qnn

        self.quant_in = qnn.QuantIdentity(bit_width=4, return_quant_tensor=False)
        self.conv1 = qnn.QuantConv2d(3, 8, 3, padding=1, weight_bit_width=4, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.relu1 = qnn.QuantReLU(bit_width=4)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = qnn.QuantConv2d(8, 8, 3, weight_bit_width=4, bias=True)
        self.relu2 = qnn.QuantReLU(bit_width=4)
        self.fc = qnn.QuantLinear(8 * 2 * 2, 10, bias=True, weight_bit_width=4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.relu1(self.bn(self.conv1(self.quant_in(x)))))
        return self.fc(self.relu2(self.conv2(x)).flatten(1))


def _bnn(name: str):
    from brevitas_examples.bnn_pynq.models import model_with_cfg

    return model_with_cfg(name, pretrained=False)[0]


CASES = {
    "cnv_1w1a": (lambda: _bnn("cnv_1w1a"), (1, 3, 32, 32)),
    "cnv_2w2a": (lambda: _bnn("cnv_2w2a"), (1, 3, 32, 32)),
    "lfc_1w1a": (lambda: _bnn("lfc_1w1a"), (1, 1, 28, 28)),
    "lfc_1w2a": (lambda: _bnn("lfc_1w2a"), (1, 1, 28, 28)),
    "quant_net": (QuantNet, (1, 3, 8, 8)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_round_trip_is_exact(name):
    torch.manual_seed(0)
    build, shape = CASES[name]
    model = build()
    random_running_stats(model)
    x = torch.rand(shape) * 2 - 1
    model.eval()(x)  # brevitas initializes its runtime statistics on the first call
    with warnings.catch_warnings():
        warnings.simplefilter("error", CustomBackwardWarning)
        ir, rebuilt = round_trip(model, (x,))
    out = model(x)
    assert out.abs().max() > 0 and out.unique().numel() > 1  # not a degenerate all-zero quantization
    assert_fixpoint(ir, rebuilt, (x,))

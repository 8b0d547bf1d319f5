"""brevitas' own example network: bnn_pynq's TFC (``FC``), 2-bit weights and activations, round-trips exactly.

Quantized identities with learned scales, a flattening ``view``, ``2.0 * x - torch.tensor([1.0])``, batch norms
between QuantLinears and the ``TensorNorm`` at the end (tests/quant covers brevitas layers one by one, and
tests/torch2ir/test_train_updates.py TensorNorm's train-mode buffer reassignment).
"""

from __future__ import annotations

import warnings

import pytest
import torch

from tests.ecosystems.roundtrip import assert_fixpoint, round_trip
from torch2ir.frontend.custom_backward import CustomBackwardWarning

pytestmark = pytest.mark.filterwarnings("ignore::torch2ir.train.dropout.TrainModeWarning")


def test_tfc_round_trips_exactly_and_reaches_a_fixpoint():
    from brevitas_examples.bnn_pynq.models.FC import FC

    torch.manual_seed(0)
    model = FC(num_classes=10, weight_bit_width=2, act_bit_width=2, in_bit_width=2, in_channels=1,
               out_features=(16, 16), in_features=(8, 8))
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm1d):
            module.running_mean.uniform_(-1, 1)
            module.running_var.uniform_(0.5, 2)
    x = torch.rand(1, 1, 8, 8)
    model.eval()(x)  # brevitas initializes its runtime statistics on the first call
    # gradients too: brevitas' straight-through estimators are recorded as torch2ir_ste operators with their own
    # backward (common.ste_ops), so no CustomBackwardWarning is left to give
    with warnings.catch_warnings():
        warnings.simplefilter("error", CustomBackwardWarning)
        ir, rebuilt = round_trip(model, (x,))
    assert any(a.get("implementation") == "torch2ir_ste.round.default" for impl in ir.values()
               if impl.graph is not None for _, a in impl.graph.nodes(data=True))
    out = model(x)
    assert out.abs().max() > 0 and out.unique().numel() > 1  # not a degenerate all-zero quantization
    assert_fixpoint(ir, rebuilt, (x,))

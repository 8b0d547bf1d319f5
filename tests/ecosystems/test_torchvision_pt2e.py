"""PT2E at every stage on torchvision's ResNet-18 and MobileNet-v2 (random weights, 10 classes, 2x3x32x32):
PTQ-prepared while it calibrates, PTQ-converted and QAT-prepared while it trains, with torchao's XNNPACK and X86
quantizers, round-trip exactly with their statistics (tests/quant/pt2e_stages.py); QAT-converted is checked on
MobileNet-v2 (``convert_pt2e`` of a QAT model takes 20 s). torchao's X86 quantizer cannot prepare torchvision's
ResNet-18 itself (``prepare_pt2e`` raises before any conversion): that is asserted, so a torchao that can is
noticed."""

from __future__ import annotations

import pytest
import torch

from tests.ecosystems.roundtrip import randomize_batch_norm
from tests.quant.pt2e_stages import assert_stage_round_trips, staged

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")

CASES = [(name, quantizer, stage) for name in ("resnet18", "mobilenet_v2") for quantizer in ("xnnpack", "x86")
         for stage in ("ptq_prepared", "ptq_converted", "qat_prepared")
         if not (name == "resnet18" and quantizer == "x86")] + [("mobilenet_v2", "x86", "qat_converted")]


def _model(tv, name: str) -> tuple[torch.nn.Module, tuple]:
    torch.manual_seed(0)
    model = tv.models.get_model(name, weights=None, num_classes=10)
    randomize_batch_norm(model)
    with torch.no_grad():  # logits of default init are too small for int8: a converted model would give zeros
        classifier = model.fc if name == "resnet18" else model.classifier[1]
        classifier.weight.mul_(30)
    return model, (torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0)),)


@pytest.mark.parametrize(("name", "quantizer", "stage"), CASES, ids=lambda v: str(v))
def test_torchvision_round_trips_at_pt2e_stage(tv, name, quantizer, stage):
    model, args = _model(tv, name)
    quantized = staged(model.eval(), args, quantizer, qat=stage.startswith("qat"), convert=stage.endswith("converted"))
    assert_stage_round_trips(quantized, args)


def test_torchaos_x86_quantizer_cannot_prepare_resnet18(tv):
    model, args = _model(tv, "resnet18")
    with pytest.raises(ValueError, match="Input partition has more than one output node"):
        staged(model.eval(), args, "x86", qat=False, convert=False)

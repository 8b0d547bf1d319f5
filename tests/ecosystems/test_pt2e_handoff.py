"""PT2E across a handoff on torchvision and timm models (issue 51, point 1; random weights, 2x3x32x32): each model
is prepared (PTQ or QAT) and calibrated, its IR saved and loaded, rebuilt, both calibrate on two more batches, and
``convert_pt2e`` of the rebuild gives the original's int8 model: outputs bit-exact, state equal
(tests/quant/pt2e_handoff.py). torchao's X86 quantizer cannot prepare torchvision's ResNet-18
(tests/ecosystems/test_torchvision_pt2e.py): XNNPACK's is used there."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.ecosystems.roundtrip import randomize_batch_norm
from tests.quant.pt2e_handoff import assert_finishes_alike
from tests.quant.pt2e_stages import quantizer

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")

CASES = [("torchvision", "resnet18", "xnnpack", False), ("torchvision", "resnet18", "xnnpack", True),
         ("torchvision", "mobilenet_v2", "x86", False), ("timm", "resnet10t", "x86", False),
         ("timm", "resnet10t", "xnnpack", True), ("timm", "resnet18d", "xnnpack", False)]


def _batch(seed: int) -> tuple[torch.Tensor]:
    return (torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(seed)),)


@pytest.mark.parametrize(("library", "name", "chosen", "qat"), CASES, ids=lambda v: str(v))
def test_a_rebuilt_prepared_model_finishes_as_the_original(library, name, chosen, qat, tmp_path: Path, request):
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e, prepare_qat_pt2e

    torch.manual_seed(0)
    if library == "torchvision":
        model = request.getfixturevalue("tv").models.get_model(name, weights=None, num_classes=10)
    else:
        # zero_init_last=False: a residual branch's last norm at 0 gives a QAT fake quantizer a zero range, and
        # the original's outputs NaN
        model = request.getfixturevalue("timm").create_model(name, pretrained=False, num_classes=10,
                                                             zero_init_last=False)
    randomize_batch_norm(model)
    with torch.no_grad():  # logits of default init are too small for int8: a converted model would give zeros
        model.get_classifier().weight.mul_(30) if hasattr(model, "get_classifier") else \
            (model.fc if name == "resnet18" else model.classifier[1]).weight.mul_(30)
    args = _batch(0)
    graph = torch.export.export(model.train(qat), args).module()
    prepared = (prepare_qat_pt2e if qat else prepare_pt2e)(graph, quantizer(chosen, qat))
    prepared(*_batch(1))
    converted = assert_finishes_alike(prepared, args, [_batch(2), _batch(3)], tmp_path)
    assert converted(*args).abs().sum() > 0

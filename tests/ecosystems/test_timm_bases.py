"""Subclasses keep their base class on timm models (issue 51, point 5; random weights): timm's ``Linear`` (an
``nn.Linear`` with its own forward; MobileNet-v3's classifier, SwiftFormer's heads) is rebuilt as an
``nn.Linear``, so every module the original's ``isinstance(m, nn.Linear)`` finds, the rebuild's finds too, and
outputs stay exact (tests/ir2torch/test_base_class.py holds the hand-written cases and the hostile records)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common.base_class import BASE_KEY
from tests.ecosystems.roundtrip import randomize_batch_norm

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")


@pytest.mark.parametrize("name", ["mobilenetv3_small_050", "swiftformer_xs"])
def test_timm_linear_is_rebuilt_as_a_linear(timm, name):
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False, num_classes=10).eval()
    randomize_batch_norm(model)
    x = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(0)) if name == "swiftformer_xs" else \
        torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    ir = torch2ir.convert(model, (x,))
    subclassed = [p for p, m in model.named_modules() if type(m) is timm.layers.Linear]
    assert subclassed and all(ir[p].meta[BASE_KEY]["type"] == "linear" for p in subclassed)
    rebuilt = ir2torch.convert(ir, model.state_dict())
    assert torch.equal(rebuilt(x), model(x))
    want = sorted(p for p, m in model.named_modules() if isinstance(m, nn.Linear))
    assert sorted(p for p, m in rebuilt.named_modules() if isinstance(m, nn.Linear)) == want
    for path in subclassed:
        mine, theirs = rebuilt.get_submodule(path), model.get_submodule(path)
        assert (mine.in_features, mine.out_features) == (theirs.in_features, theirs.out_features)
        assert [n for n, _ in mine.named_parameters()] == [n for n, _ in theirs.named_parameters()]

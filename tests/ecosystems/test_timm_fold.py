"""fold_batchnorm on timm CNNs, whose norms are ``BatchNormAct2d`` (a BatchNorm2d subclass computing its batch norm
and its activation in its own graph): each batch norm after a conv is folded into it, the activation stays.

Random running statistics and affine parameters (``randomize_batchnorms``), so a norm left unfolded, or folded
wrongly, shows in the output. Counts per model: every batch norm of the model is folded, or listed in ``skipped``
with why (what is left: DenseNet's norm after a concatenation, RepVGG's identity branch, FastViT's norm of a
block's input: none of them follows a layer). The loop stays a fixpoint (provenance aside).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common.compare import equal
from common.rewrite import fold_batchnorm
from tests.rewrite.helpers import randomize_batchnorms

#: model -> (folded, left alone, the reason the ones left share); FastViT's 24 left are plain ``nn.BatchNorm2d``s
#: (rebuilt as such), the others' are ``BatchNormAct2d``s, rebuilt from their graphs as instances of their base
#: class, ``nn.BatchNorm2d`` (``meta["base"]``): every norm left alone is a batch norm in the rebuild
CASES = {
    "lcnet_050": (27, 0, ""),
    "mobilenetv3_small_050": (34, 0, ""),
    "efficientnet_b0": (49, 0, ""),
    "regnetx_002": (44, 0, ""),
    "repvgg_a0": (44, 17, "not folded: it does not follow"),
    "densenet121": (59, 62, "not folded: it does not follow"),
    "fastvit_t8": (46, 24, "follows input, not a Conv"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_timm_batch_norms_fold_with_their_activation_kept(timm, name):
    folded, left, why = CASES[name]
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False, num_classes=10).eval()
    norms = randomize_batchnorms(model)
    assert norms == folded + left
    x = torch.randn(1, 3, 64, 64)
    result = fold_batchnorm(torch2ir.convert(model, (x,)), model.state_dict())
    assert result.count == folded and len(result.skipped) == left, result.skipped[:3]
    assert all(why in line for line in result.skipped)
    rebuilt = ir2torch.convert(*result)
    with torch.no_grad():
        want = model(x)
        got = rebuilt(x)
    torch.testing.assert_close(got, want, atol=2e-6 * float(want.abs().max()), rtol=0)
    left_norms = [m for m in rebuilt.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    assert len(left_norms) == left
    assert equal(torch2ir.convert(rebuilt, (x,)), result.ir, ignore=("provenance",))

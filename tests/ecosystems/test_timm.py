"""timm's models round-trip exactly: one per family, shrunk through ``create_model``'s keyword arguments.

ResNet (``resnet10t``: deep stem, avg-pool downsample), ConvNeXt (LayerNorm2d, layer scale), ViT (class token,
fused attention), LCNet (built by the EfficientNet builder: ``BatchNormAct2d``, hard-swish, squeeze-excitation),
FastViT (reparameterizable MobileOne blocks, RepMixer) and DenseNet (``torch.jit.is_scripting()`` branches and
a list of features per layer). No weights are downloaded (``pretrained=False``).
"""

from __future__ import annotations

import pytest
import torch

from tests.ecosystems.roundtrip import assert_fixpoint, assert_guarded, round_trip

# eval mode is what is compared; DropPath and python-side batch-norm counters make train mode differ, which the
# conversion says with a TrainModeWarning (tests/torch2ir covers the warning itself)
pytestmark = pytest.mark.filterwarnings("ignore::torch2ir.training.TrainModeWarning")

CASES = {
    "resnet10t": {},
    "convnext_atto": {"depths": (1, 1, 1, 1)},
    "vit_tiny_patch16_224": {"depth": 2, "img_size": 32},
    "lcnet_050": {},
    "fastvit_t8": {"layers": (1, 1, 1, 1)},
    "densenet121": {"block_config": (2, 2), "growth_rate": 8},
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_round_trip_is_exact(timm, name):
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False, num_classes=10, **CASES[name])
    x = torch.randn(1, 3, 32, 32)
    ir, rebuilt = round_trip(model, (x,))
    if name == "densenet121":
        assert_fixpoint(ir, rebuilt, (x,))
        assert_guarded(rebuilt, (x,))


def test_batch_norm_act_is_exact_with_its_running_statistics(timm):
    """``BatchNormAct2d`` (batch norm, then its own activation) reads running statistics it was given."""
    from timm.layers import BatchNormAct2d

    torch.manual_seed(0)
    norm = BatchNormAct2d(8, act_layer="hard_swish")
    norm.running_mean.uniform_(-1, 1)
    norm.running_var.uniform_(0.5, 2)
    round_trip(torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), norm), (torch.randn(1, 3, 8, 8),))

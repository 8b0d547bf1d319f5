"""torchvision's models round-trip exactly (random weights, no download, small inputs).

One model per family, at the smallest configuration that still has the family's constructs: DenseNet's
``_DenseLayer`` takes a list argument named ``input`` (its generated unpacking once shadowed the body's own
names: silently wrong), RegNet names its blocks ``block1-0`` (a ``-`` refused the whole model), LRASPP takes an
``OrderedDict`` whose keys are not sorted (refused, printing tensor values), ShuffleNet's ``branch1`` is an
``nn.Sequential``, ViT and Swin carry attention and window shifts. The whole registry (GoogLeNet, Inception and the
segmentation, video and quantizable models too) is ``python -m benchmarks.sweep --zoo torchvision``.
"""

from __future__ import annotations

import pytest
import torch

from tests.ecosystems.roundtrip import assert_fixpoint, assert_guarded, round_trip

# eval mode is what is compared; DropPath and python-side batch-norm counters make train mode differ, which the
# conversion says with a TrainModeWarning (tests/torch2ir covers the warning itself)
pytestmark = pytest.mark.filterwarnings("ignore::torch2ir.train.dropout.TrainModeWarning")


def _densenet(tv):
    return tv.models.DenseNet(growth_rate=8, block_config=(2, 2), num_init_features=8, bn_size=2), 32


def _regnet(tv):
    from torchvision.models.regnet import BlockParams, RegNet

    params = BlockParams.from_init_params(depth=4, w_0=8, w_a=8.0, w_m=2.0, group_width=8)
    return RegNet(params), 32


def _vit(tv):
    return tv.models.VisionTransformer(image_size=32, patch_size=16, num_layers=2, num_heads=2, hidden_dim=16,
                                       mlp_dim=32, num_classes=10), 32


def _swin(tv):
    from torchvision.models.swin_transformer import SwinTransformer

    return SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 2], window_size=[2, 2],
                           num_classes=10), 32


def _mobilenet_v3(tv):
    """Three inverted residuals of MobileNetV3-small's kinds: squeeze-excitation, ReLU and hardswish, stride 2."""
    from torchvision.models.mobilenetv3 import InvertedResidualConfig, MobileNetV3

    setting = [
        InvertedResidualConfig(16, 3, 16, 16, True, "RE", 2, 1, 1.0),
        InvertedResidualConfig(16, 3, 32, 24, False, "HS", 2, 1, 1.0),
        InvertedResidualConfig(24, 5, 48, 24, True, "HS", 1, 1, 1.0),
    ]
    return MobileNetV3(setting, last_channel=32, num_classes=10), 32


def _lraspp(tv):
    """LRASPP's head takes an ``OrderedDict`` whose keys ("low", "high") are not sorted."""
    from torchvision.models._utils import IntermediateLayerGetter
    from torchvision.models.segmentation.lraspp import LRASPP

    features = _mobilenet_v3(tv)[0].features
    backbone = IntermediateLayerGetter(features, return_layers={"1": "low", "3": "high"})
    return _Segmenter(backbone, LRASPP(backbone, 16, 24, num_classes=3, inter_channels=8)), 32


class _Segmenter(torch.nn.Module):
    """torchvision's ``lraspp_*`` wraps the head like this (upsampled to the input, ``{"out": ...}``)."""

    def __init__(self, backbone: torch.nn.Module, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return self.model(x)


def _efficientnet(tv):
    """EfficientNet-B0's seven stages, one MBConv each (stochastic depth, squeeze-excitation, SiLU)."""
    from torchvision.models.efficientnet import EfficientNet, _efficientnet_conf

    setting, last = _efficientnet_conf("efficientnet_b0", width_mult=0.25, depth_mult=0.1)
    return EfficientNet(setting, dropout=0.2, num_classes=10, last_channel=last), 32


def _shufflenet(tv):
    from torchvision.models.shufflenetv2 import ShuffleNetV2

    return ShuffleNetV2([2, 1, 1], [8, 16, 32, 64, 64], num_classes=10), 32


def _named(name, size, **kwargs):
    def build(tv):
        return tv.models.get_model(name, weights=None, **kwargs), size

    build.__name__ = name
    return build


CASES = {
    "resnet18": _named("resnet18", 32),
    "densenet": _densenet,
    "regnet": _regnet,
    "mobilenet_v3": _mobilenet_v3,
    "efficientnet": _efficientnet,
    "shufflenet_v2": _shufflenet,
    "squeezenet1_1": _named("squeezenet1_1", 64),
    "vit": _vit,
    "swin": _swin,
    "lraspp": _lraspp,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_round_trip_is_exact(tv, name):
    torch.manual_seed(0)
    model, size = CASES[name](tv)
    _randomize_batch_norm(model)
    x = torch.randn(1, 3, size, size)
    ir, rebuilt = round_trip(model, (x,))
    if name in ("densenet", "regnet", "resnet18"):
        assert_fixpoint(ir, rebuilt, (x,))
        assert_guarded(rebuilt, (x,))


def _randomize_batch_norm(model: torch.nn.Module) -> None:
    """Running statistics other than 0 and 1, so that a batch norm read from the wrong input shows."""
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.uniform_(-1, 1)
            module.running_var.uniform_(0.5, 2)

"""Every video model of torchvision (``torchvision.models.list_models(module=torchvision.models.video)``: r3d_18,
mc3_18, r2plus1d_18, s3d, mvit_v1_b, mvit_v2_s, swin3d_t, swin3d_s, swin3d_b) round-trips exactly: random
weights (``weights=None``, 10 classes), eval outputs exact, also after a JSON save and load, and every parameter's
gradient exact after one backward pass (:func:`tests.ecosystems.roundtrip.round_trip`).

Inputs are the smallest each model takes: 1x3x4x32x32 for the ResNets, MViTs (built for that clip size: their
builders fix ``spatial_size`` and ``temporal_size``, so ``_mvit`` is called with the small ones) and Swin3Ds;
S3D's final ``AvgPool3d(2, 7, 7)`` needs 16 frames of 224x224. The three 3D ResNets convert back to their IR
(fixpoint); MC3-18 (batch norm) is also exact in train mode (seeded, running statistics updated alike), has every
graph module swappable for the original's, and lowers (``ir.lower()``) to a FlatIR that runs exactly. MViT-v2-S,
Swin3D-S and -B (MViT-v1-B's and Swin3D-T's code, larger) compare outputs only, no gradients, to keep the time
down.
"""

from __future__ import annotations

import pytest
import torch

from tests.ecosystems.roundtrip import assert_every_check, assert_fixpoint, randomize_batch_norm, round_trip

# eval mode is what round_trip compares; stochastic depth (MViT, Swin3D) makes train mode differ, which the
# conversion says with a TrainModeWarning
pytestmark = pytest.mark.filterwarnings("ignore::torch2ir.train.dropout.TrainModeWarning")

SMALL = (1, 3, 4, 32, 32)
#: name -> input shape
CASES = {
    "r3d_18": SMALL, "mc3_18": SMALL, "r2plus1d_18": SMALL,
    "s3d": (1, 3, 16, 224, 224),
    "mvit_v1_b": SMALL, "mvit_v2_s": SMALL,
    "swin3d_t": SMALL, "swin3d_s": SMALL, "swin3d_b": SMALL,
}
RESNETS = ("r3d_18", "mc3_18", "r2plus1d_18")
OUTPUTS_ONLY = ("mvit_v2_s", "swin3d_s", "swin3d_b")  # the code of mvit_v1_b / swin3d_t, larger: no gradients


def test_every_video_model_is_covered(tv):
    assert sorted(tv.models.list_models(module=tv.models.video)) == sorted(CASES)


def _build(tv, name: str, monkeypatch) -> torch.nn.Module:
    if name.startswith("mvit"):
        from torchvision.models.video import mvit

        build = mvit._mvit
        monkeypatch.setattr(mvit, "_mvit", lambda **kw: build(**{**kw, "spatial_size": SMALL[3:],
                                                                  "temporal_size": SMALL[2]}))
    return tv.models.get_model(name, weights=None, num_classes=10)


@pytest.mark.parametrize("name", sorted(CASES))
def test_round_trip_is_exact(tv, name, monkeypatch):
    torch.manual_seed(0)
    model = _build(tv, name, monkeypatch)
    randomize_batch_norm(model)
    x = torch.randn(CASES[name])
    ir, rebuilt = round_trip(model, (x,), gradients=name not in OUTPUTS_ONLY)
    if name in RESNETS:
        assert_fixpoint(ir, rebuilt, (x,))
    if name == "mc3_18":
        assert_every_check(model, ir, rebuilt, (x,))

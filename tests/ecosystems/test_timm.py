"""timm's models round-trip exactly: one model per timm family, shrunk (the sample: ``timm_sample.py``).

Every model of the sample (71 families, sorted): eval-mode outputs bit-for-bit equal to eager's, also after a
JSON save and load of the IR, and every parameter's gradient equal after one backward pass (``round_trip``).
The 30 models of :data:`DEEP` (the faster ones: the file keeps to about four minutes with ``-n0`` on two
shared cores) also convert back to the same IR (fixpoint), run exactly as the flat ATen IR lowered from the
conversion's capture (``ir.lower()``), have every module rebuilt from a graph swapped for the original one
with outputs exact, and refuse a batch of two (the root's input guard). Train mode is ``test_timm_train.py``.

``naflexvit`` and ``vision_transformer_sam`` resize their position embeddings with
``F.interpolate(mode="bicubic", antialias=True)``, which ``torch.export`` writes as
``aten._upsample_bicubic2d_aa.vec`` (allowed since this sample found the allow-list refusing it).
Every family of the sample converts; :data:`UNLOWERED` and :data:`UNSIGNED` list the models whose lowering or
swaps are refused, and why.
"""

from __future__ import annotations

import copy
import os

import pytest
import torch

from common.errors import ConversionError
from tests.ecosystems.roundtrip import assert_fixpoint, assert_guarded, assert_lowered, assert_swappable, round_trip
from tests.ecosystems.timm_sample import CASES, SLOW, build, family_of

# eval mode is what is compared here; train mode, with its TrainModeWarning where it differs, is test_timm_train.py
pytestmark = pytest.mark.filterwarnings("ignore::torch2ir.train.dropout.TrainModeWarning")

#: families whose rebuilt modules keep data-flow arguments (no call signature: not swappable): family -> why
#: (CoaT, whose ConvPosEnc is registered under two paths, was here until the call recorder saw through the tracer's
#: module proxies: tests/loop/test_signatures.py)
UNSIGNED: dict[str, str] = {}

#: families whose flat ATen IR is refused: family -> what the ConversionError names
UNLOWERED = {
    # LiteMLA computes its attention under ``torch.autocast(enabled=False)``, which export writes as a
    # higher-order op; the module-level IR keeps it (rebuilt exact), the FlatIR cannot hold it
    "efficientvit_mit": "wrap_with_autocast",
}

#: families that also go through the fixpoint, lowering, swap and input-guard checks (those whose extra checks
#: took under 1.6 s, and the two whose lowering or swaps are refused)
DEEP = frozenset({
    "beit", "byobnet", "cait", "coat", "convit", "convmixer", "convnext", "deit", "densenet", "dpn",
    "efficientformer", "efficientnet", "efficientvit_mit", "eva", "fasternet", "inception_next", "mambaout",
    "metaformer", "mlp_mixer", "resnet", "resnetv2", "swin_transformer", "swin_transformer_v2",
    "swin_transformer_v2_cr", "tnt", "tresnet", "vgg", "visformer", "vision_transformer",
    "vision_transformer_hybrid",
})


@pytest.mark.parametrize("family", sorted(CASES))
def test_round_trip_is_exact(timm, family):
    model, x = build(timm, family)
    built = copy.deepcopy(model).eval()  # not run yet, for the swaps
    ir, rebuilt = round_trip(model, (x,))
    if family in DEEP:
        assert_fixpoint(ir, rebuilt, (x,))
        if family in UNLOWERED:
            with pytest.raises(ConversionError, match=UNLOWERED[family]):
                ir.lower()
        else:
            assert_lowered(ir, model, (x,))
        if family in UNSIGNED:
            with pytest.raises(AssertionError, match="keeps data-flow arguments"):
                assert_swappable(ir, built, rebuilt, (x,))
        else:
            assert assert_swappable(ir, built, rebuilt, (x,)) > 0
        assert_guarded(rebuilt, (x,))


if os.environ.get("TORCH2IR_TIMM_SLOW"):  # defined on request only: they would double the file's time

    @pytest.mark.parametrize("family", sorted(SLOW))
    def test_slow_family_round_trip_is_exact(timm, family):
        model, x = build(timm, family)
        built = copy.deepcopy(model).eval()
        ir, rebuilt = round_trip(model, (x,))
        assert_fixpoint(ir, rebuilt, (x,))
        assert_lowered(ir, model, (x,))
        assert assert_swappable(ir, built, rebuilt, (x,)) > 0


def test_the_sample_is_one_model_per_family(timm):
    assert len(CASES) >= 60
    assert list(CASES) == sorted(CASES)
    assert not set(CASES) & set(SLOW)
    wrong = {family: family_of(name) for family, (name, _, _) in {**CASES, **SLOW}.items()
             if family_of(name) != family}
    assert not wrong, wrong


def test_batch_norm_act_is_exact_with_its_running_statistics(timm):
    """``BatchNormAct2d`` (batch norm, then its own activation) reads running statistics it was given."""
    from timm.layers import BatchNormAct2d

    torch.manual_seed(0)
    norm = BatchNormAct2d(8, act_layer="hard_swish")
    norm.running_mean.uniform_(-1, 1)
    norm.running_var.uniform_(0.5, 2)
    round_trip(torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), norm), (torch.randn(1, 3, 8, 8),))

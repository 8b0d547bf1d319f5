"""timm's models in train mode: exact where the conversion says nothing, a ``TrainModeWarning`` where it differs.

The models of :data:`TRAIN` (27 of the faster ones of ``timm_sample.py``'s sample, within the time budget) are
converted in train mode on a batch of two (batch norm needs two values per channel where a stage ends at 1x1).
Where no ``TrainModeWarning`` is raised, one forward pass of the rebuild from the same seed gives outputs
bit-for-bit equal to the original's and leaves every buffer equal (batch-norm running statistics updated
alike); where one is, :data:`WARNS` says which models and why, so that a train mode is never silently
different and the list stays true both ways.
"""

from __future__ import annotations

import pytest
import torch

from tests.ecosystems.roundtrip import train_round_trip
from tests.ecosystems.timm_sample import CASES, build

#: DropPath (stochastic depth) at the variant's default ``drop_path_rate``: random numbers drawn in train mode only
_DROP_PATH = "random ops only in train mode"

#: family -> what its TrainModeWarning says. timm's ``BatchNormAct2d`` (byobnet, densenet, dpn, efficientnet,
#: repghost, resnetv2, tresnet) reads ``self.training`` and counts ``num_batches_tracked`` in Python; its batch
#: norm is carried as its base's forward in both modes (torch2ir.train.batch_norm), so those families are exact
WARNS = {"swin_transformer": _DROP_PATH}

#: families checked in train mode (those whose train-mode check took under 1.3 s)
TRAIN = [
    "beit", "byobnet", "cait", "convit", "convmixer", "convnext", "deepseek_vit", "deit", "densenet", "dpn",
    "efficientnet", "eva", "fasternet", "inception_next", "metaformer", "mlp_mixer", "repghost", "resnet",
    "resnetv2", "swin_transformer", "swin_transformer_v2_cr", "tnt", "tresnet", "vgg", "visformer",
    "vision_transformer", "vision_transformer_hybrid",
]


def test_the_train_sample_is_of_the_sample():
    assert set(TRAIN) <= set(CASES) and set(WARNS) <= set(TRAIN) and sorted(TRAIN) == TRAIN


@pytest.mark.parametrize("family", TRAIN)
def test_train_mode_is_exact_or_warned(timm, family):
    model, x = build(timm, family)
    messages = train_round_trip(model, (torch.cat([x, x.flip(-1)]),))
    if family in WARNS:
        assert messages and all(WARNS[family] in m for m in messages), messages
    else:
        assert not messages, messages

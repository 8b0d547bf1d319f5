"""timm models whose norms are ``BatchNormAct2d`` (CoAtNet, MobileViTv2, FastViT; issue 51, point 3) are exact in
train mode: no ``TrainModeWarning``, and after one seeded train-mode forward and backward pass of the rebuild, its
outputs, every buffer (running statistics, ``num_batches_tracked``) and every parameter's gradient equal the
original's bit for bit; eval mode stays exact. Random weights and statistics, small inputs, no downloads."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

import ir2torch
import torch2ir
from common.python_functions import MODULE_BATCH_NORM
from tests.ecosystems.roundtrip import assert_exact, randomize_batch_norm
from tests.helpers import assert_same_gradients
from torch2ir.train.dropout import TrainModeWarning

#: model -> (its options, batch norms computed in a module's own graph, carried in both modes)
CASES = {
    "coatnet_nano_rw_224": ({"img_size": 64}, 22),
    "mobilevitv2_050": ({}, 25),
    "fastvit_t8": ({}, 46),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_batch_norm_act_models_are_exact_in_train_mode(timm, name):
    options, carried = CASES[name]
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False, num_classes=10, **options)
    randomize_batch_norm(model)
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    model.train()
    original, state = copy.deepcopy(model), copy.deepcopy(model.state_dict())
    with warnings.catch_warnings():
        warnings.simplefilter("error", TrainModeWarning)
        ir = torch2ir.convert(model, (x,))
    assert sum(a.get("implementation") == MODULE_BATCH_NORM for impl in ir.values() if impl.type == "module"
               for _, a in impl.graph.nodes(data=True)) == carried
    rebuilt = ir2torch.convert(ir, state).train()
    outputs = []
    for module in (original, rebuilt):
        torch.manual_seed(0)
        with torch.no_grad():
            outputs.append(module(x))
    assert_exact(outputs[1], outputs[0])
    expected, got = original.state_dict(), rebuilt.state_dict()
    assert sorted(got) == sorted(expected)
    assert not [k for k, v in expected.items() if not torch.equal(v, got[k])]
    assert any(k.endswith("num_batches_tracked") and int(v) == 1 for k, v in got.items())
    assert_same_gradients(original, rebuilt, (x,), {})  # a second train-mode step, with gradients
    assert not [k for k, v in original.state_dict().items() if not torch.equal(v, rebuilt.state_dict()[k])]
    original.eval(), rebuilt.eval()
    with torch.no_grad():
        assert_exact(rebuilt(x), original(x))

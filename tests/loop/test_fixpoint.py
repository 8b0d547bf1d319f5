"""The loop closes: converting a rebuilt model gives back the IR it was rebuilt from.

``torch2ir.convert(ir2torch.convert(ir, state), args, kwargs) == ir`` (the IR's own equality: types,
attributes, graphs with node names and edges, state records, meta including the original class), and a
second round changes nothing. Random models from :mod:`common.testing` (200 per run) and the zoo.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from torch import fx, nn

import ir2torch
import torch2ir
from common.testing import models_and_inputs
from tests.conftest import examples
from tests.models.zoo import ZOO
from torch2ir.train.dropout import TrainModeWarning


def _round(model, args, kwargs):
    ir = torch2ir.convert(model, args, kwargs)
    rebuilt = ir2torch.convert(ir, model.state_dict())
    return ir, rebuilt, torch2ir.convert(rebuilt, args, kwargs)


def _differences(a, b) -> list[str]:
    return sorted(k for k in set(a) | set(b) if k not in a or k not in b or a[k] != b[k])


@settings(max_examples=examples(200), suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(models_and_inputs())
def test_random_models_convert_back_to_their_ir(case):
    model, args, kwargs = case
    ir, _, again = _round(model, args, kwargs)
    assert again == ir, _differences(ir, again)


@pytest.mark.parametrize("case", ZOO, ids=lambda c: c.name)
def test_zoo_models_reach_a_fixpoint_in_one_round(case):
    model = case.build()
    args, kwargs = case.inputs()
    ir, rebuilt, again = _round(model, args, kwargs)
    assert again == ir, _differences(ir, again)
    # graph modules keep their hierarchy and the class they stand for
    graphs = [k for k, impl in ir.items() if impl.graph.number_of_nodes() and impl.type == "module"]
    assert all(isinstance(rebuilt.get_submodule("" if k == "root" else k), fx.GraphModule) for k in graphs)
    assert all(again[k].graph.number_of_nodes() == ir[k].graph.number_of_nodes() for k in graphs)
    # and a second round changes nothing
    third = torch2ir.convert(ir2torch.convert(again, rebuilt.state_dict()), args, kwargs)
    assert third == again, _differences(again, third)


def test_frozen_parameters_of_handled_leaves_stay_frozen():
    """A builder makes parameters trainable; the rebuild restores each recorded requires_grad flag."""
    model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 2))
    model[0].weight.requires_grad_(False)
    ids = torch.tensor([[1, 2, 3]])
    ir, rebuilt, again = _round(model.eval(), (ids,), {})
    flags = {k: p.requires_grad for k, p in model.named_parameters()}
    assert {k: p.requires_grad for k, p in rebuilt.named_parameters()} == flags
    assert flags["0.weight"] is False
    assert again == ir


@pytest.mark.parametrize("name", ["beit_droppath", "whisper_encoder"])
def test_real_models_with_train_notes_and_frozen_weights_reach_a_fixpoint(name):
    """DropPath (train-only randomness, noted in the root's meta) and Whisper (frozen positions)."""
    from tests.real.corpus import CORPUS

    arch = next(a for a in CORPUS if a.name == name)
    model = arch.build()
    args, kwargs = arch.inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TrainModeWarning)
        ir, _, again = _round(model, args, kwargs)
    assert again == ir, _differences(ir, again)


class _SharedAcrossShapes(nn.Module):
    """One Linear-ReLU block registered under two names and called on inputs of two shapes."""

    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Flatten(0))
        self.again = self.block

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.block(x), self.again(y)


def test_a_module_called_under_two_names_with_two_shapes_gets_a_graph_per_call():
    model = _SharedAcrossShapes().eval()
    args = (torch.randn(2, 4), torch.randn(3, 2, 4))
    ir, rebuilt, again = _round(model, args, {})
    assert len(ir["block"].variants) == 1 and ir["block"].aliases == ["again"]
    assert all(torch.equal(a, b) for a, b in zip(rebuilt(*args), model(*args)))
    assert again == ir, _differences(ir, again)

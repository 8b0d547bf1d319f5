"""Eval-mode dropout keeps its input's name in the trace (torch2ir.frontend.dropout_identity).

On torch 2.14 the export tracer records eval-mode dropout as returning its input itself, and without
``KeepInputNames`` the rebuild of the models below was silently different in train mode (0.88 on the first,
DeBERTa-v2 2.3e-4; tried on torch 2.14.1). On torch 2.13 the dropout returns a tensor of its own and the mode
changes nothing: the tests force it on there to check that, and check the train-mode results on any torch.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import ir2torch
import torch2ir
from torch2ir.frontend import dropout_identity


class ReadsBoth(nn.Module):
    """Reads a tensor and its dropped-out value: ``x + dropout(x)``."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.linear(x)
        return x + F.dropout(x, 0.5, self.training)


class Layer(nn.Module):
    def __init__(self, functional: bool) -> None:
        super().__init__()
        self.functional = functional
        self.drop = nn.Dropout(0.25)
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, shared: torch.Tensor) -> torch.Tensor:
        shared = F.dropout(shared, 0.25, self.training) if self.functional else self.drop(shared)
        return self.linear(x) + shared[:2].sum()


class Shares(nn.Module):
    """Passes one tensor to two layers that each drop it out inside (as DeBERTa-v2's relative embeddings)."""

    def __init__(self, functional: bool) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(4)
        self.layers = nn.ModuleList([Layer(functional), Layer(functional)])

    def forward(self, x: torch.Tensor, shared: torch.Tensor) -> torch.Tensor:
        shared = self.norm(shared)
        for layer in self.layers:
            x = layer(x, shared)
        return x


def _train_mode_pair(model: nn.Module, args: tuple) -> tuple[torch.Tensor, torch.Tensor, object]:
    model = model.train()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ir = torch2ir.convert(model, args, trace_once=False)
    rebuilt = ir2torch.convert(ir, model.state_dict()).train()
    torch.manual_seed(0)
    expected = model(*args)
    torch.manual_seed(0)
    return expected, rebuilt(*args), ir


@pytest.fixture(params=[False, True], ids=["as-is", "mode-forced"])
def forced(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    if request.param:
        monkeypatch.setattr(dropout_identity, "returns_its_input", lambda: True)
    return request.param


def test_a_tensor_and_its_dropout_stay_two_values(forced: bool) -> None:
    torch.manual_seed(1)
    expected, got, ir = _train_mode_pair(ReadsBoth(), (torch.randn(3, 4),))
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    add = ir["root"].graph.nodes["add"]
    assert add["args"][0] != add["args"][1], add  # linear + dropout, not dropout + dropout


@pytest.mark.parametrize("functional", [False, True], ids=["module", "functional"])
def test_layers_sharing_a_dropped_out_tensor_keep_their_signature(forced: bool, functional: bool) -> None:
    torch.manual_seed(2)
    expected, got, ir = _train_mode_pair(Shares(functional), (torch.randn(2, 4), torch.randn(3, 4)))
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    for path in ("layers.0", "layers.1"):
        assert ir[path].meta.get("forward_arg_names") == ["x", "shared"], (path, ir[path].meta)


def test_the_mode_leaves_other_calls_alone() -> None:
    x = torch.randn(3)
    with dropout_identity.KeepInputNames():
        assert F.dropout(x, 0.5, False, True) is x  # in place: the result is the input, by contract
        assert torch.equal(F.dropout(x, 0.5, False), x)
        assert torch.equal(torch.relu(x), x.relu())
    assert dropout_identity._eval_call(F.dropout, (x, 0.5), {}) is False  # training defaults to True
    assert dropout_identity._eval_call(F.alpha_dropout, (x, 0.5), {}) is True  # training defaults to False
    assert dropout_identity._eval_call(torch.ops.aten.dropout.default, (x, 0.5, False), {}) is True

"""Every rebuilt root checks its inputs, whether it runs generated code or is a module a builder made.

A root of a type with a builder (``nn.Sequential`` is rebuilt as a real, indexable ``nn.Sequential``) had no
generated code for the input guard to sit in, and ran unguarded: ``Sequential(Linear(8, 8), <x.reshape(x.shape[0],
-1)>)`` converted at batch 2 and called at batch 4 returned a ``(2, 64)`` result instead of ``(4, 32)``, with no
error (``ir2torch.guards.root``).
"""

from __future__ import annotations

import copy
import inspect
from collections import OrderedDict

import pytest
import torch
from torch import nn
from torch.export import Dim

import ir2torch
import torch2ir
from common import IR
from common.errors import InputMismatchError
from tests.helpers import max_abs_diff


class _Flatten(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], -1)


def _sequential() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 8), _Flatten()).eval()


class _Looped(nn.Module):
    """A root driven by a ``ModuleList``: rebuilt from its graph."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8), _Flatten()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def _nested() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(OrderedDict([("inner", nn.Sequential(nn.Linear(8, 8), nn.ReLU())),
                                      ("flat", _Flatten())])).eval()


ROOTS = {"sequential": _sequential, "nested sequential": _nested, "module list": lambda: _Looped().eval()}


@pytest.mark.parametrize("kind", list(ROOTS))
def test_a_root_called_with_another_batch_is_refused(kind: str, tmp_path) -> None:
    model = ROOTS[kind]()
    x = torch.randn(2, 4, 8)
    ir = torch2ir.convert(model, (x,))
    for source in (ir, IR.load(ir.save(tmp_path / "m.json"))):
        rebuilt = ir2torch.convert(source, model.state_dict())
        assert type(rebuilt) is type(model) or kind == "module list"
        with torch.no_grad():
            assert max_abs_diff(rebuilt(x), model(x)) == 0
            assert model(torch.randn(4, 4, 8)).shape == (4, 32)
            with pytest.raises(InputMismatchError, match=r"dim 0 is 4, not 2") as info:
                rebuilt(torch.randn(4, 4, 8))
            assert info.value.key in ("input", "x")
            with pytest.raises(InputMismatchError, match="dtype"):
                rebuilt(x.double())
            with pytest.raises(InputMismatchError, match="positional arguments"):
                rebuilt(x, x)


def test_the_sequential_root_keeps_its_class_signature_and_hooks() -> None:
    model = _sequential()
    x = torch.randn(2, 4, 8)
    ir = torch2ir.convert(model, (x,))
    rebuilt = ir2torch.convert(ir, model.state_dict())
    assert type(rebuilt) is nn.Sequential and isinstance(rebuilt[0], nn.Linear)
    assert not (rebuilt._forward_pre_hooks or rebuilt._forward_hooks)
    assert inspect.signature(rebuilt.forward) == inspect.signature(model.forward)
    with torch.no_grad():
        assert max_abs_diff(rebuilt(input=x), model(input=x)) == 0
    assert torch2ir.convert(rebuilt, (x,)) == ir  # the loop closes: the guard records nothing
    unguarded = ir2torch.convert(ir, model.state_dict(), guard_inputs=False)
    assert "forward" not in vars(unguarded)


def test_deep_copies_of_a_sequential_root_check_their_own_calls() -> None:
    model = _sequential()
    x = torch.randn(2, 4, 8)
    rebuilt = ir2torch.convert(torch2ir.convert(model, (x,)), model.state_dict())
    twice = copy.deepcopy(copy.deepcopy(rebuilt))
    assert twice.forward.__self__ is twice
    with torch.no_grad():
        twice[0].bias.add_(1)  # the copy runs its own weights
        assert max_abs_diff(twice(x), model(x)) > 0.1
        assert max_abs_diff(rebuilt(x), model(x)) == 0
    with pytest.raises(InputMismatchError):
        twice(torch.randn(4, 4, 8))


@pytest.mark.parametrize("batch", [3, 5])
def test_a_sequential_with_a_dynamic_batch_runs_it_and_checks_its_range(batch: int) -> None:
    """(Its graph reads the batch size, so it is rebuilt from its graph, which holds the guard.)"""
    model = _sequential()
    ir = torch2ir.convert(model, (torch.randn(2, 4, 8),), dynamic_shapes={"input": {0: Dim("b", min=2, max=5)}})
    rebuilt = ir2torch.convert(ir, model.state_dict())
    x = torch.randn(batch, 4, 8)
    with torch.no_grad():
        assert max_abs_diff(rebuilt(x), model(x)) == 0
    with pytest.raises(InputMismatchError, match="outside the range"):
        rebuilt(torch.randn(6, 4, 8))

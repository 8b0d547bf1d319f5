"""An opaque leaf holding a ``functools.partial`` its constructor makes (transformers' ``GELUTanh`` holds
``partial(gelu, approximate="tanh")``: Cosmos3, Cohere Compass' vision towers) is constructed again when the
construction reproduces it (the same function, equal arguments), and refused by name when it does not."""

from __future__ import annotations

import functools

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common.errors import ConversionError


class Act(nn.Module):
    """A data-dependent branch (export cannot trace it) around a partial the constructor makes."""

    def __init__(self, approximate: str = "tanh") -> None:
        super().__init__()
        self.approximate = approximate
        self.act = functools.partial(nn.functional.gelu, approximate=approximate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(x) if x.sum() > 0 else -x


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.act = Act()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.lin(x))


CLASS = f"{__name__}.Act"
X = torch.randn(2, 4).abs() + 1


def test_a_partial_the_constructor_reproduces_is_constructed_again() -> None:
    torch.manual_seed(0)
    model = Model().eval()
    ir = torch2ir.convert(model, (X,), opaque="auto")
    assert ir["act"].type == "opaque" and ir["act"].data["init"] == {"approximate": "tanh"}
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=[CLASS])
    assert rebuilt.act.act.keywords == {"approximate": "tanh"}
    for x in (X, -X):
        assert torch.equal(rebuilt(x), model(x))
    assert torch2ir.convert(rebuilt, (X,), opaque="auto") == ir


@pytest.mark.parametrize("changed", [
    functools.partial(nn.functional.gelu, approximate="none"),  # another argument
    functools.partial(nn.functional.silu),  # another function
])
def test_a_partial_changed_after_construction_is_refused_by_name(changed: functools.partial) -> None:
    torch.manual_seed(0)
    model = Model().eval()
    model.act.act = changed
    with pytest.raises(ConversionError, match=r"attribute 'act' of type partial.*does not reproduce it"):
        torch2ir.convert(model, (X,), opaque="auto")


class Clamp(nn.Module):
    """A partial with two keywords of one type: ``min`` and ``max``."""

    def __init__(self) -> None:
        super().__init__()
        self.act = functools.partial(torch.clamp, min=-0.5, max=0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(x) if x.sum() > 0 else -x


def test_a_partial_with_its_keywords_swapped_is_refused() -> None:
    """The same keywords in another order with their values swapped (``clamp(max=-0.5, min=0.5)``) is another
    function of the input: compared in the dictionaries' order, the values matched and the constructor's partial
    was taken for it."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), Clamp()).eval()
    model[1].act = functools.partial(torch.clamp, max=-0.5, min=0.5)
    assert not torch.equal(model[1].act(X), Clamp().act(X))
    with pytest.raises(ConversionError, match=r"attribute 'act' of type partial.*does not reproduce it"):
        torch2ir.convert(model, (X,), opaque="auto")

"""A child of an opaque leaf whose own conversion is refused by the default operator surface (issue 50) is not made
opaque to get around it: the conversion is refused naming the operator and the ``allow=`` that opts in, as for any
model (diffusers' Lumina2, whose blocks call ``aten.view_as_complex``, was refused with an unrelated message about
a module deep inside a block left opaque)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common.errors import ConversionError


class Take(nn.Module):
    """Calls ``aten.take``, outside the default surface."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.take(self.lin(x), torch.tensor([0, 5, 11])) * 2


class Root(nn.Module):
    """Its own forward branches on data: an opaque root, ``block`` traced on its own."""

    def __init__(self) -> None:
        super().__init__()
        self.block = Take()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return y if x.sum() > 0 else -y


X = torch.randn(3, 4).abs()


def test_a_surface_refusal_below_an_opaque_leaf_is_said_as_it_is() -> None:
    torch.manual_seed(0)
    model = Root().eval()
    with pytest.raises(ConversionError, match="aten.take"):
        torch2ir.convert(model, (X,), opaque="auto")
    ir = torch2ir.convert(model, (X,), opaque="auto", allow=["aten::take"])
    assert ir.root.type == "opaque" and ir["block"].type == "module"
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=[f"{__name__}.Root", "aten::take"])
    for x in (X, -X):
        assert torch.equal(rebuilt(x), model(x))

"""A module passed to another module's ``forward`` as an argument (transformers' PP-DocLayoutV3 passes
``norm=self.decoder_norm`` to its decoder): no attribute path of the caller reaches it, so conversion refuses it
naming both modules. It was cut from its name (``decoder_norm`` read as ``decoder`` + ``norm``): the rebuild then
called the caller's own ``norm``, silently, or failed only when run."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common.errors import ConversionError


class _Decoder(nn.Module):
    def __init__(self, own_norm: bool) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        if own_norm:
            self.norm = nn.LayerNorm(4)  # what the cut name reached

    def forward(self, x: torch.Tensor, norm: nn.Module | None = None) -> torch.Tensor:
        x = self.lin(x)
        if hasattr(self, "norm"):
            x = self.norm(x)
        return norm(x) * 2 if norm is not None else x


class _Model(nn.Module):
    def __init__(self, own_norm: bool, pass_module: bool) -> None:
        super().__init__()
        self.decoder = _Decoder(own_norm)
        self.decoder_norm = nn.LayerNorm(4)
        self.pass_module = pass_module
        with torch.no_grad():
            self.decoder_norm.weight.fill_(3.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pass_module:
            return self.decoder(x, norm=self.decoder_norm)
        return self.decoder_norm(self.decoder(x)) * 2  # the same computation, the module called where it is held


@pytest.mark.parametrize("own_norm", [True, False])
def test_a_module_passed_as_an_argument_is_refused_naming_both_modules(own_norm: bool) -> None:
    model = _Model(own_norm, pass_module=True).eval()
    with pytest.raises(ConversionError, match=r"module 'decoder_norm' is called inside 'decoder', which does not "
                                              r"hold it \(a module passed as an argument"):
        torch2ir.convert(model, (torch.randn(2, 4),))


@pytest.mark.parametrize("own_norm", [True, False])
def test_the_same_computation_calling_the_module_where_it_is_held_is_exact(own_norm: bool) -> None:
    torch.manual_seed(0)
    model, x = _Model(own_norm, pass_module=False).eval(), torch.randn(2, 4)
    rebuilt = ir2torch.convert(torch2ir.convert(model, (x,)), model.state_dict())
    with torch.no_grad():
        assert torch.equal(rebuilt(x), model(x))

"""The mechanism of ``torch2ir.frontend.transformers_compiling`` on a stand-in module, this file (transformers itself
is covered by ``tests/real/test_switch_transformers.py``): a module of reviewed source builds its default mask only
when ``not is_torchdynamo_compiling()``, as Switch Transformers' and LongT5's stacks do; while a conversion
exports, that name answers eager mode's ``False`` in this module, so the traced program builds the mask the eager
call built; it is put back after, and another source is not decided."""

from __future__ import annotations

import sys

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from torch2ir.frontend import transformers_compiling as tc
from torch2ir.frontend.export import ExportFailedError


def is_torchdynamo_compiling() -> bool:
    """transformers' ``is_torchdynamo_compiling``, in short."""
    return torch.compiler.is_compiling()


class Stack(nn.Module):
    """A mask built only when not compiling, then subscripted (``None`` while exporting, without the answer)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        if attention_mask is None and not is_torchdynamo_compiling():
            attention_mask = torch.ones(x.shape[:2])
        bias = (1.0 - attention_mask[:, :, None]) * -3.0
        return self.lin(x) + bias * torch.arange(4.0)


@pytest.fixture
def reviewed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tc, "SITES", {__name__: frozenset({tc.module_hash(sys.modules[__name__])})})


X = torch.randn(2, 5, 4)
MASK = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])


def test_the_mask_is_built_as_in_eager_mode_and_the_name_put_back(reviewed: None) -> None:
    torch.manual_seed(0)
    model = Stack().eval()
    with pytest.raises(TypeError, match="NoneType"):  # plain export builds no mask and subscripts None
        torch.export.export(model, (X,), strict=False)
    assert tc.reviewed(__name__) is not None
    ir = torch2ir.convert(model, (X,))
    rebuilt = ir2torch.convert(ir, model.state_dict())
    assert torch.equal(rebuilt(X), model(X))
    assert torch2ir.convert(rebuilt, (X,)) == ir
    assert sys.modules[__name__].is_torchdynamo_compiling is is_torchdynamo_compiling  # put back
    padded = ir2torch.convert(torch2ir.convert(model, (X, MASK)), model.state_dict())  # the mask given: as before
    assert torch.equal(padded(X, MASK), model(X, MASK))


def test_another_source_is_not_decided(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tc, "SITES", {__name__: frozenset({"0" * 64})})
    assert tc.reviewed(__name__) is None
    with pytest.raises(ExportFailedError):
        torch2ir.convert(Stack().eval(), (X,))
    assert sys.modules[__name__].is_torchdynamo_compiling is is_torchdynamo_compiling


def test_nothing_is_replaced_when_the_original_does_not_answer_false(reviewed: None,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    assert tc.reviewed(__name__) is not None
    monkeypatch.setattr(sys.modules[__name__], "is_torchdynamo_compiling", lambda: True)
    assert tc.reviewed(__name__) is None  # its eager answer is not False: not decided
    monkeypatch.setattr(sys.modules[__name__], "is_torchdynamo_compiling", lambda: 1 / 0)
    assert tc.reviewed(__name__) is None  # no answer: not decided

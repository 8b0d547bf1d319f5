"""Models whose first call changes their own weights (RWKV rescales them for inference at its first eval call),
and forwards running a functorch transform (torch.vmap)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common.errors import ConversionError


class _Rescaled(nn.Module):
    """RWKV's pattern: the first eval-mode call divides a leaf's weight in place, under ``no_grad``."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.rescaled = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training == self.rescaled:
            with torch.no_grad():
                self.lin.weight.div_(2.0)
            self.rescaled = not self.training
        return self.lin(x)


def test_a_parameter_written_in_place_by_the_first_call_is_refused_naming_it() -> None:
    torch.manual_seed(0)
    model, x = _Rescaled().eval(), torch.randn(2, 4)
    weight = model.lin.weight.detach().clone()
    with pytest.raises(ConversionError, match=r"writes parameter 'lin\.weight' in place.*call the model once"):
        torch2ir.convert(model, (x,))
    assert torch.equal(model.lin.weight, weight) and model.rescaled is False  # the user's model is untouched


@pytest.mark.filterwarnings("ignore::torch2ir.train.dropout.TrainModeWarning")  # train mode rescales back: warned
def test_after_its_first_call_the_model_converts_exactly() -> None:
    torch.manual_seed(0)
    model, x = _Rescaled().eval(), torch.randn(2, 4)
    expected = model(x)
    rebuilt = ir2torch.convert(torch2ir.convert(model, (x,)), model.state_dict())
    assert torch.equal(rebuilt(x), expected) and torch.equal(rebuilt(x), model(x))


@pytest.mark.filterwarnings("ignore::torch2ir.train.dropout.TrainModeWarning")
def test_rwkv_fresh_is_refused_and_converts_exactly_after_one_call() -> None:
    from transformers import RwkvConfig, RwkvModel

    torch.manual_seed(0)
    config = RwkvConfig(vocab_size=100, hidden_size=32, num_hidden_layers=4, attention_hidden_size=32,
                        intermediate_size=64, context_length=16, use_cache=False, rescale_every=2)
    model, ids = RwkvModel(config).eval(), torch.randint(0, 100, (1, 8))
    reference = copy.deepcopy(model)
    with pytest.raises(ConversionError, match=r"blocks\.3\.attention\.output\.weight"):
        torch2ir.convert(model, (ids,), {"use_cache": False})
    expected = model(ids, use_cache=False).last_hidden_state
    assert torch.equal(expected, reference(ids, use_cache=False).last_hidden_state)  # the refusal changed nothing
    ir = torch2ir.convert(model, (ids,), {"use_cache": False})
    rebuilt = ir2torch.convert(ir, model.state_dict())
    assert torch.equal(rebuilt(ids, use_cache=False).last_hidden_state, expected)


class _Vmapped(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.vmap(lambda row: row * row.sum())(x)


class _VmappedCall(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.vmap(lambda row: self.proj(row) * row.sum())(x)


def test_torch_vmap_in_a_forward_is_carried_as_the_operators_it_dispatches() -> None:
    """T5Gemma2 and the Nemotron speech models call ``torch.vmap`` in their forward; export keeps the transform's
    runtime calls, which the IR does not carry: the region is traced again below the batching
    (torch2ir.frontend.vmap_regions), in the module-level IR and in the lowered one."""
    x = torch.randn(3, 4)
    model = _Vmapped()
    rebuilt = ir2torch.convert(torch2ir.convert(model, (x,)), model.state_dict())
    assert torch.equal(rebuilt(x), model(x))
    assert torch.equal(ir2torch.convert(torch2ir.lower(model, (x,)), model)(x), model(x))


def test_torch_vmap_around_a_module_call_is_refused_once_naming_the_transform() -> None:
    """A module called inside the transform: the region is not one module's graph, and is refused."""
    x = torch.randn(3, 4)
    for convert in (torch2ir.convert, torch2ir.lower):
        with pytest.raises(ConversionError, match=r"(?s)^[^\n]*1 (unsupported )?construct.*torch\.vmap") as caught:
            convert(_VmappedCall(), (x,))
        assert "leaf module" in str(caught.value) and "_vmap_increment_nesting" in str(caught.value)

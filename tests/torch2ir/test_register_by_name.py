"""Handlers registered by qualified class name (``Torch2Ir.register_by_name``, how torchao's PT2E observers are
handled without importing torchao): registered on a converter when a model first holds exactly that class,
carried by copies, refused twice or with a reserved type; the ir2torch builder of a torchao observer says what
to install when torchao cannot be imported."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common.errors import DuplicateHandlerError, IRError, IRFormatError, RegistryError


class Scale(nn.Module):
    def __init__(self, factor: float = 2.0) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor


class SubScale(Scale):
    pass


NAME = f"{__name__}.Scale"


def _converter() -> torch2ir.Torch2Ir:
    converter = torch2ir.get_default_converter()
    converter.register_by_name(NAME, lambda m: {"factor": m.factor}, type="team_scale")
    return converter


def test_a_class_registered_by_name_is_handled_once_a_model_holds_it():
    converter = _converter()
    assert Scale not in converter.types() and converter.named_types()[NAME] == "team_scale"
    model = nn.Sequential(nn.Linear(3, 3), Scale(3.0))
    ir = converter.convert(model, (torch.randn(2, 3),))
    assert ir["1"].type == "team_scale" and ir["1"].data == {"factor": 3.0}
    assert converter.types()[Scale] == "team_scale"
    assert converter.copy().named_types() == converter.named_types()


def test_a_subclass_is_not_the_named_class():
    converter = _converter()
    ir = converter.convert(nn.Sequential(SubScale()), (torch.randn(2, 3),))
    assert ir["0"].type == "module"  # traced as a graph


def test_a_name_registered_twice_or_with_a_reserved_type_is_refused():
    converter = _converter()
    with pytest.raises(DuplicateHandlerError, match="Scale"):
        converter.register_by_name(NAME, lambda m: {}, type="other")
    with pytest.raises(RegistryError, match="reserved"):
        converter.register_by_name("x.Y", lambda m: {}, type="module")


def test_a_torchao_observer_without_torchao_is_a_clear_error(monkeypatch):
    from torchao.quantization.pt2e.observer import MinMaxObserver

    import ir2torch.handlers.quant as quant

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), MinMaxObserver())
    x = torch.randn(2, 3)
    model(x)
    ir = torch2ir.convert(model, (x,))
    assert ir["1"].type == "pt2e_minmaxobserver"
    rebuilt = ir2torch.convert(ir, model.state_dict())
    assert type(rebuilt[1]) is MinMaxObserver and torch.equal(rebuilt[1].min_val, model[1].min_val)

    def no_torchao(name: str):
        raise ImportError(f"No module named {name!r}")

    monkeypatch.setattr(quant.importlib, "import_module", no_torchao)
    with pytest.raises(IRFormatError, match="torchao cannot be imported") as info:
        ir2torch.convert(ir, model.state_dict())
    assert info.value.hint == "pip install torchao"


@pytest.mark.parametrize(("name", "value"), [("__class__", "x"), ("quant_min", "0; import os"),
                                             ("qscheme", {"qscheme": "__import__"}), ("dtype", "float32")])
def test_hostile_attributes_of_a_torchao_observer_are_refused(name, value):
    from torchao.quantization.pt2e.observer import HistogramObserver

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), HistogramObserver())
    x = torch.randn(2, 3)
    model(x)
    ir = torch2ir.convert(model, (x,))
    assert ir["1"].type == "pt2e_histogramobserver"
    ir["1"].data = {**ir["1"].data, name: value}
    with pytest.raises(IRError):
        ir2torch.convert(ir, model.state_dict())

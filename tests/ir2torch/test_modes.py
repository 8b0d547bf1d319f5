"""Each rebuilt module gets the ``training`` flag the original had, written the way its class takes it: in the
module's dictionary where ``nn.Module.__setattr__`` would put it, through the class's own ``__setattr__`` or
``training`` property otherwise (``ir2torch.rebuild.assemble.restore_modes``)."""

from __future__ import annotations

import torch
from torch import nn

import ir2torch
import torch2ir


class Watched(nn.Linear):
    """A user's layer that sees every attribute set on it."""

    def __setattr__(self, name: str, value: object) -> None:
        if name == "training":
            self.__dict__.setdefault("seen", []).append(value)
        super().__setattr__(name, value)


class FlagProperty(nn.ReLU):
    """A user's layer whose ``training`` is a property."""

    @property
    def training(self) -> bool:  # type: ignore[override]
        return self.__dict__.get("_flag", True)

    @training.setter
    def training(self, value: bool) -> None:
        self.__dict__["_flag"] = value
        self.__dict__.setdefault("seen", []).append(value)


def _model() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4), nn.Dropout(0.5)).eval()
    model[2].train()  # recorded as training
    model[3].train()
    return model


def test_flags_are_the_originals_for_plain_and_generated_modules() -> None:
    model = _model()
    rebuilt = ir2torch.convert(torch2ir.convert(model, (torch.randn(2, 4),)), model.state_dict())
    assert [m.training for m in rebuilt.modules()] == [m.training for m in model.modules()]
    assert all("training" in vars(m) for m in rebuilt.modules())
    x = torch.randn(2, 4)
    torch.manual_seed(1)
    expected = model(x)
    torch.manual_seed(1)
    assert torch.equal(rebuilt(x), expected)  # the dropout in train mode drops the same elements


def test_a_class_with_its_own_setattr_or_training_property_is_set_through_it() -> None:
    model = _model()
    ir = torch2ir.convert(model, (torch.randn(2, 4),))
    converter = ir2torch.get_default_converter()
    converter.register_override("linear", lambda impl: Watched(**impl.data))
    converter.register_override("relu", lambda impl: FlagProperty(**impl.data))
    rebuilt = converter.convert(ir, model.state_dict())
    first, relu, second = rebuilt[0], rebuilt[1], rebuilt[2]
    assert isinstance(first, Watched) and isinstance(relu, FlagProperty)
    assert first.training is False and first.seen == [False]
    assert second.training is True and second.seen == [False, True]
    assert relu.training is False and relu.seen[-1] is False and "training" not in vars(relu)
    x = torch.randn(2, 4)
    assert torch.equal(rebuilt.eval()(x), model.eval()(x))

"""A child traced on its own below an opaque leaf keeps the notes of its own conversion (``meta["train_trace"]``,
``meta["train_buffers"]``, ``meta["custom_backward"]``): its rebuild carries them, so converting the rebuild again
gives the same IR (the loop closes) and the note means for the rebuilt child what it meant for the original."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common import IR
from common.errors import IRValidationError
from common.notes import CUSTOM_BACKWARD_KEY, CustomBackwardWarning
from common.opaque import traced_alone
from tests.torch2ir.test_custom_backward import _RoundSte
from tests.torch2ir.test_custom_backward_opaque import Net
from torch2ir.train.passes import COMPUTATIONS_NOTE


class Doubling(nn.Module):
    """Computes otherwise in train mode, and counts its train-mode calls in a buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("steps", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.steps += 1
            return self.lin(x) * 2
        return self.lin(x)


class Branching(nn.Module):
    """Its own forward branches on data: an opaque root, its child traced on its own."""

    def __init__(self) -> None:
        super().__init__()
        self.block = Doubling()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x) if x.sum() > 0 else -x


ROOT = f"{__name__}.Branching"
X = torch.randn(3, 4).abs()


def _converted() -> tuple[Branching, IR]:
    torch.manual_seed(0)
    model = Branching().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model, torch2ir.convert(model, (X,), opaque="auto")


def test_a_child_traced_alone_keeps_its_train_mode_notes() -> None:
    _, ir = _converted()
    assert ir.root.type == "opaque" and traced_alone(ir) == ["block"]
    child = ir["block"].meta
    assert child["train_trace"] == f"{COMPUTATIONS_NOTE}root"  # "root": the child, root of its own conversion
    assert child["train_buffers"] == ["steps"]
    assert ir.root.meta["train_trace"] == f"block: {COMPUTATIONS_NOTE}root"  # the model's root lists it under its path
    assert ir.root.meta["train_buffers"] == ["block.steps"]


def test_the_rebuilt_child_carries_them_and_the_loop_closes() -> None:
    model, ir = _converted()
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=[ROOT])
    assert torch.equal(rebuilt(X), model(X))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        alone = torch2ir.convert(rebuilt.block, (X,))  # the rebuilt child stands for the original one
        again = torch2ir.convert(rebuilt, (X,), opaque="auto")
    assert again == ir
    # its rebuild's train mode runs the eval graph: without the carried note, its conversion would find nothing
    assert alone.root.meta["train_trace"] == ir["block"].meta["train_trace"]
    assert alone.root.meta["train_buffers"] == ["steps"]
    loaded = IR.from_dict(ir.to_dict())
    assert torch2ir.convert(ir2torch.convert(loaded, model.state_dict(), allow=[ROOT]), (X,), opaque="auto") == ir


def test_notes_elsewhere_than_the_root_or_a_child_traced_alone_are_refused() -> None:
    model, ir = _converted()
    data = ir.to_dict()
    data["block.lin"]["meta"]["train_trace"] = "applied"  # a typed leaf: its rebuild would not carry it
    with pytest.raises(IRValidationError, match="train_trace belongs to the root"):
        ir2torch.convert(IR.from_dict(data), model.state_dict(), allow=[ROOT])


class Holder(nn.Module):
    """Named opaque (its own code is plain): its child ``net`` calls a custom autograd.Function."""

    def __init__(self) -> None:
        super().__init__()
        self.net = Net()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x) + 1


def test_a_child_traced_alone_keeps_its_custom_functions_note() -> None:
    """With explicit classes (no search for the modules calling custom Functions), the child traced on its own
    keeps the Functions its conversion saw, its rebuild carries them, and converting the rebuild again (or a file of
    the IR) still says so: the rebuild warns, and the loop closes."""
    torch.manual_seed(0)
    model = Holder().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ir = torch2ir.convert(model, (X,), opaque=[Holder])
    names = [f"{_RoundSte.__module__}.{_RoundSte.__qualname__}"]
    assert traced_alone(ir) == ["net"]
    assert ir["net"].meta[CUSTOM_BACKWARD_KEY] == ir.root.meta[CUSTOM_BACKWARD_KEY] == names
    with pytest.warns(CustomBackwardWarning):
        rebuilt = ir2torch.convert(IR.from_dict(ir.to_dict()), model.state_dict(), allow=[f"{__name__}.Holder"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert torch2ir.convert(rebuilt, (X,), opaque=[Holder]) == ir

"""``copy.deepcopy`` of a rebuilt model keeps its lifted constants (``torch.tensor(...)`` made in a forward: plain
tensor attributes, not in the state dict) as they are: fx's ``GraphModule`` deep copy would register them as
buffers (the copy's state dict gaining keys) and drop those only a second call's graph reads (the copy failing)."""

from __future__ import annotations

import copy

import torch
from torch import nn

import ir2torch
import torch2ir


class _Offset(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tensor([1.0, 2.0, 3.0])


class _Scaled(nn.Module):
    def forward(self, x: torch.Tensor, scale: float) -> torch.Tensor:
        return x * torch.tensor([scale, 2 * scale, 3 * scale])


class _Twice(nn.Module):
    """Its child called twice with another constant: two per-call graphs, each reading its own lifted constant."""

    def __init__(self) -> None:
        super().__init__()
        self.scaled = _Scaled()
        self.lin = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scaled(self.lin(x), 0.5) + self.scaled(x, 4.0)


def _rebuilt(model: nn.Module, x: torch.Tensor) -> nn.Module:
    return ir2torch.convert(torch2ir.convert(model, (x,)), model.state_dict())


def test_a_copy_keeps_its_lifted_constants_plain_and_its_state_dict_the_same() -> None:
    model, x = _Offset().eval(), torch.randn(2, 3)
    rebuilt = _rebuilt(model, x)
    twin = copy.deepcopy(rebuilt)
    assert list(twin.state_dict()) == list(rebuilt.state_dict()) == []
    assert "lifted_tensor_0" in vars(twin) and not dict(twin.named_buffers())
    assert vars(twin)["lifted_tensor_0"] is not vars(rebuilt)["lifted_tensor_0"]  # a copy, not shared
    assert torch.equal(twin(x), model(x))
    assert torch2ir.convert(twin, (x,)) == torch2ir.convert(rebuilt, (x,))
    again = copy.deepcopy(twin)  # a copy of a copy reads the copy's constants, as they are when it is made
    vars(twin)["lifted_tensor_0"].fill_(0.0)
    assert torch.equal(copy.deepcopy(twin)(x), x) and torch.equal(again(x), model(x))


def test_a_copy_keeps_the_constants_only_a_second_calls_graph_reads() -> None:
    torch.manual_seed(0)
    model, x = _Twice().eval(), torch.randn(2, 3)
    rebuilt = _rebuilt(model, x)
    assert {n for n, _ in rebuilt.scaled.__dict__.items() if n.startswith("lifted_tensor")} == \
        {"lifted_tensor_0", "lifted_tensor_1"}
    twin = copy.deepcopy(rebuilt)
    assert torch.equal(twin(x), model(x))
    assert twin.state_dict().keys() == rebuilt.state_dict().keys() == model.state_dict().keys()

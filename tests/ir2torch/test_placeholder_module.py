"""Rebuilt modules are constructed without fx compiling an empty graph first (``shared_code.placeholder_module``),
and end up exactly as fx's own constructor leaves a ``GraphModule``: same class layout, attributes, code; copies,
deep copies and later ``gm.graph = g`` behave as fx's."""

from __future__ import annotations

import copy
from unittest import mock

import torch
from torch import fx, nn

import ir2torch
import torch2ir
from ir2torch.shared_code import placeholder_module


def _relu_graph() -> fx.Graph:
    graph = fx.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call_function(torch.relu, (x,)))
    return graph


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.lin(x)) * 2


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([_Block() for _ in range(3)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x) + x
        return x


def test_constructor_compiles_nothing_and_the_install_compiles_once():
    with mock.patch.object(fx.GraphModule, "recompile", autospec=True,
                           side_effect=fx.GraphModule.recompile) as recompile:
        gm = placeholder_module("Foo")
        assert recompile.call_count == 0
        fx.GraphModule(nn.Module(), fx.Graph(), class_name="Foo")
        assert recompile.call_count == 1  # fx's own constructor does compile the empty graph
        gm.graph = _relu_graph()
        assert recompile.call_count == 2


def test_same_class_layout_attributes_and_code_as_fx():
    ours = placeholder_module("Foo")
    ours.graph = _relu_graph()
    theirs = fx.GraphModule(nn.Module(), _relu_graph(), class_name="Foo")
    assert [c.__qualname__ for c in type(ours).__mro__] == [c.__qualname__ for c in type(theirs).__mro__]
    assert type(ours).__mro__[1:] == (fx.GraphModule, nn.Module, object)
    assert type(ours).__name__ == "Foo"
    assert type(ours) is not type(theirs)  # one class per instance, as fx does
    assert set(vars(ours)) == set(vars(theirs))
    assert ours.code == theirs.code
    x = torch.tensor([-1.0, 2.0])
    assert torch.equal(ours(x), theirs(x))


def test_deep_copy_and_regraph_are_fx_behaviour():
    gm = placeholder_module("Foo")
    gm.graph = _relu_graph()
    clone = copy.deepcopy(gm)
    x = torch.tensor([-3.0, 1.0])
    assert torch.equal(clone(x), torch.relu(x))
    graph = fx.Graph()
    y = graph.placeholder("x")
    graph.output(graph.call_function(torch.neg, (y,)))
    clone.graph = graph  # recompiles that module only
    assert torch.equal(clone(x), -x)
    assert torch.equal(gm(x), torch.relu(x))


def test_rebuilt_model_matches_and_copies_run():
    model = _Net().eval()
    x = torch.randn(2, 4)
    ir = torch2ir.convert(model, (x,))
    rebuilt = ir2torch.convert(ir, model.state_dict())
    with torch.no_grad():
        expected = model(x)
        assert torch.equal(rebuilt(x), expected)
        assert torch.equal(copy.deepcopy(rebuilt)(x), expected)
    for module in rebuilt.modules():
        if isinstance(module, fx.GraphModule):
            assert type(module).__mro__[1] is fx.GraphModule
            assert module.code  # installed: every rebuilt module has generated source

"""Rebuilt modules are constructed without fx compiling an empty graph first (``shared_code.placeholder_module``),
and end up exactly as fx's own constructor leaves a ``GraphModule``: same class layout, attributes, code; copies,
deep copies and later ``gm.graph = g`` behave as fx's."""

from __future__ import annotations

import copy
import gc
from unittest import mock

import torch
from torch import fx, nn

import ir2torch
import torch2ir
from ir2torch.codegen.shared import placeholder_module


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


def test_without_a_graph_it_holds_the_rest_and_leaves_no_garbage():
    """``graph=False`` (a template's instance, given a graph at once): no empty graph made only to be dropped, whose
    reference cycles only the cyclic collector would free."""
    with_graph, without = placeholder_module("Foo"), placeholder_module("Foo", graph=False)
    assert [k for k in vars(with_graph) if k != "_graph"] == list(vars(without))
    assert isinstance(with_graph.__dict__["_graph"], fx.Graph) and "_graph" not in vars(without)
    assert _dropped_empty_graphs() == 20  # what graph=False saves: each a cycle only the collector frees


def _dropped_empty_graphs() -> int:
    """How many of the empty graphs 20 modules made with ``graph=True`` are freed only by the cyclic collector once
    each module is given its real graph (the modules are kept)."""
    gc.collect()
    enabled, flags = gc.isenabled(), gc.get_debug()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds stays in gc.garbage, to be looked at
    try:
        kept, empty = [], set()
        for _ in range(20):
            gm = placeholder_module("Foo")
            empty.add(id(gm.__dict__["_graph"]))
            gm.graph = _relu_graph()
            kept.append(gm)
        gc.collect()
        return sum(id(o) in empty for o in gc.garbage if isinstance(o, fx.Graph))
    finally:
        gc.set_debug(flags)
        gc.garbage.clear()
        if enabled:
            gc.enable()


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


def _state(gm: fx.GraphModule) -> dict:
    return {k: (type(v), v if isinstance(v, (bool, int, float, str, type(None))) else len(v))
            for k, v in vars(gm).items() if k != "_graph"}


def test_attributes_are_fx_constructors_with_new_containers_per_module():
    first, second = placeholder_module("Foo"), placeholder_module("Bar")
    theirs = fx.GraphModule(nn.Module(), fx.Graph(), class_name="Foo")
    # each attribute fx's constructor sets, in its order, of the same type and (empty) value
    assert list(vars(first)) == [k for k in vars(theirs) if k not in ("_code", "_lineno_map", "_prologue_start",
                                                                      "_in_spec", "_out_spec")]
    assert _state(first) == {k: v for k, v in _state(theirs).items() if k in vars(first)}
    for name, value in vars(first).items():
        if isinstance(value, (dict, list, set)):
            assert value is not vars(second)[name], name  # nothing shared between two modules
    assert first.graph is not second.graph and first.graph.owning_module is first
    first.register_buffer("b", torch.zeros(1))
    first.register_forward_hook(lambda *a: None)
    assert "b" not in second._buffers and not second._forward_hooks


def test_an_attribute_of_an_unknown_kind_makes_it_run_fx_constructor(monkeypatch):
    from ir2torch.codegen import shared as shared_code

    monkeypatch.setattr(shared_code, "_FRESH", [None])  # what a torch whose modules hold something else gives
    with mock.patch.object(fx.GraphModule, "__init__", autospec=True,
                           side_effect=fx.GraphModule.__init__) as init:
        gm = placeholder_module("Foo")
    assert init.call_count == 1
    gm.graph = _relu_graph()
    assert torch.equal(gm(torch.tensor([-1.0, 1.0])), torch.tensor([0.0, 1.0]))


def test_a_constructor_that_fills_a_container_is_not_cloned(monkeypatch):
    from ir2torch.codegen import shared as shared_code

    original = fx.GraphModule.__init__

    def filling(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.__dict__["_registry"] = {"seen": 1}  # a torch version whose modules start with something in a dict

    monkeypatch.setattr(fx.GraphModule, "__init__", filling)
    monkeypatch.setattr(shared_code, "_FRESH", [])
    assert shared_code._fresh_state() is None
    gm = placeholder_module("Foo")
    assert gm._registry == {"seen": 1}  # made by the constructor itself

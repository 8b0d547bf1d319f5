"""Identical graphs of one conversion share their generated code, and stay independent modules
(``ir2torch.codegen.shared``): the repeated layers of a real Llama and BERT, and graphs that differ in a constant."""

from __future__ import annotations

import copy
import inspect

import pytest
import torch
from torch import nn
from torch.utils import _pytree as pytree

import ir2torch
import torch2ir
from ir2torch.codegen.shared import graph_key, value_key
from tests.real.corpus import CORPUS


def _arch(name: str):
    return next(a for a in CORPUS if a.name == name)


def _exact(a, b) -> bool:
    la, sa = pytree.tree_flatten(a)
    lb, sb = pytree.tree_flatten(b)
    return sa == sb and all(torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y
                            for x, y in zip(la, lb, strict=True))


def _rebuilt(name: str):
    arch = _arch(name)
    model = arch.build().eval()
    args, kwargs = arch.inputs()
    ir = torch2ir.convert(model, args, kwargs)
    return model, ir2torch.convert(ir, model.state_dict()), args, kwargs


def _run(module: nn.Module, args, kwargs):
    with torch.no_grad():
        return module(*args, **kwargs)


def test_llama_layers_share_code_and_stay_independent_modules() -> None:
    model, rebuilt, args, kwargs = _rebuilt("llama")
    first, second = rebuilt.model.layers[0], rebuilt.model.layers[1]
    # one generated and compiled forward for both layers, each its own class, function, graph and parameters
    assert type(first) is not type(second)
    assert type(first).forward is not type(second).forward
    assert type(first).forward.__code__ is type(second).forward.__code__
    assert first.graph is not second.graph and first.code == second.code
    assert first.print_readable(print_output=False) == second.print_readable(print_output=False)
    assert "def forward" in first.code
    original = [p.name for p in inspect.signature(model.model.layers[0].forward).parameters.values()
                if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    for layer in (first, second):
        shown = list(inspect.signature(layer.forward).parameters)
        assert shown[: len(original)] == original
    assert first.self_attn.q_proj.weight is not second.self_attn.q_proj.weight
    expected = _run(model, args, kwargs)
    assert _exact(expected, _run(rebuilt, args, kwargs))

    # a hook on one layer fires for that layer only
    calls: list[str] = []
    handle = first.register_forward_hook(lambda m, a, out: calls.append("first"))
    _run(rebuilt, args, kwargs)
    handle.remove()
    assert calls == ["first"]

    # changing one layer's weights changes that layer only, exactly as in eager PyTorch
    with torch.no_grad():
        first.mlp.down_proj.weight.mul_(0.5)
        model.model.layers[0].mlp.down_proj.weight.mul_(0.5)
    assert torch.equal(second.mlp.down_proj.weight, model.model.layers[1].mlp.down_proj.weight)
    changed = _run(model, args, kwargs)
    assert not _exact(expected, changed)
    assert _exact(changed, _run(rebuilt, args, kwargs))

    # swapping one layer for the original leaves the other a rebuilt module running the shared code
    rebuilt.model.layers[1] = copy.deepcopy(model.model.layers[1])
    assert _exact(changed, _run(rebuilt, args, kwargs))
    assert type(first).forward.__code__ is type(second).forward.__code__

    # recompiling one layer gives it code of its own and leaves the other's alone
    shared = type(second).forward
    first.recompile()
    assert type(first).forward.__code__ is not shared.__code__
    assert type(second).forward is shared
    assert _exact(changed, _run(rebuilt, args, kwargs))


def test_bert_layers_share_code_and_outputs_stay_exact() -> None:
    model, rebuilt, args, kwargs = _rebuilt("bert")
    layers = rebuilt.encoder.layer
    assert type(layers[0]).forward.__code__ is type(layers[1]).forward.__code__
    attention = [layers[i].attention.self for i in (0, 1)]
    assert type(attention[0]).forward.__code__ is type(attention[1]).forward.__code__
    assert _exact(_run(model, args, kwargs), _run(rebuilt, args, kwargs))


class _Scale(nn.Module):
    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor


class _Scales(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c, self.d = _Scale(2.0), _Scale(3.0), _Scale(2.0), _Scale(-0.0)
        self.e = _Scale(0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([self.a(x), self.b(x), self.c(x), self.d(x), self.e(x)])


def test_graphs_differing_in_a_constant_do_not_share_code() -> None:
    model = _Scales().eval()
    x = torch.tensor([1.0, -2.0])
    rebuilt = ir2torch.convert(torch2ir.convert(model, (x,)), model.state_dict())
    code = {name: type(rebuilt.get_submodule(name)).forward.__code__ for name in "abcde"}
    assert code["a"] is code["c"]
    assert code["a"] is not code["b"]
    assert code["d"] is not code["e"]  # -0.0 and 0.0 are spelled differently
    got = rebuilt(x)
    assert torch.equal(got, model(x))
    assert torch.equal(torch.signbit(got[3]), torch.signbit(model(x)[3]))


@pytest.mark.parametrize(("one", "other"), [
    (1, True), (1.0, 1), (0.0, -0.0), ([1, 2], (1, 2)), ({"a": 1}, {"a": 1.0}), (torch.float32, torch.float64),
    (torch.device("cpu"), torch.device("meta")), (slice(0, 1), slice(0, 2)), (object(), object()),
])
def test_value_keys_tell_differently_spelled_values_apart(one, other) -> None:
    assert value_key(one) != value_key(other)
    assert value_key(one) == value_key(one)


def test_value_key_of_nan_is_equal_to_itself() -> None:
    assert value_key(float("nan")) == value_key(float("nan"))


def test_graph_key_refuses_when_fx_writes_node_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    graph = torch.fx.Graph()
    graph.output(graph.placeholder("x"))
    assert graph_key(graph) is not None
    monkeypatch.setenv("FX_GRAPH_SHOW_META", "1")
    assert graph_key(graph) is None

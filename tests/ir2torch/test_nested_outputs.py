"""A rebuilt module returns its original output structure, built by its generated code without ``tree_unflatten``.

Tuples and lists are written as literals and every other pytree node (dict, named tuple, ``ModelOutput``, ``None``)
is built by its registered unflatten function, at any depth. Each case compares the rebuilt output with eager
PyTorch's, type by type and value by value, at the top level and as a child's output its parent reads.
"""

from __future__ import annotations

from collections import OrderedDict, namedtuple
from typing import Any

import pytest
import torch
from torch import nn
from transformers.modeling_outputs import BaseModelOutput

import ir2torch
import torch2ir
from common.errors import IRSerializationError

Pair = namedtuple("Pair", ["low", "high"])
if Pair not in torch.utils._pytree.SUPPORTED_NODES:  # a named tuple the IR can name (as libraries register theirs)
    torch.utils._pytree._register_namedtuple(Pair, serialized_type_name="tests.ir2torch.test_nested_outputs.Pair")

def _tuple_of_constants(x: torch.Tensor) -> Any:
    return x * 2, (x.shape[0], 8)


def _deep(x: torch.Tensor) -> Any:
    return {"a": [x + 1, (x * 3, 3)], "b": None, "c": Pair(x.sum(), [x.relu()])}


def _model_output_in_tuple(x: torch.Tensor) -> Any:
    return (BaseModelOutput(last_hidden_state=x.tanh(), hidden_states=(x, x * 2)), [[x - 1], []], ())


def _ordered(x: torch.Tensor) -> Any:
    return [OrderedDict(second=x.exp(), first=x.neg()), (x,)]


STRUCTURES = {"tuple_of_constants": _tuple_of_constants, "deep": _deep, "model_output_in_tuple": _model_output_in_tuple,
              "ordered": _ordered}


class _Child(nn.Module):
    def __init__(self, build: Any) -> None:
        super().__init__()
        self.build = build
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> Any:
        return self.build(self.lin(x))


class _Parent(nn.Module):
    """Returns the child's structure and reads a leaf of it, so the child's output is rebuilt for its parent too."""

    def __init__(self, build: Any) -> None:
        super().__init__()
        self.child = _Child(build)

    def forward(self, x: torch.Tensor) -> Any:
        out = self.child(x)
        first = torch.utils._pytree.tree_leaves(out)[0]
        return out, first * 2


def _assert_same(got: Any, expected: Any, where: str = "output") -> None:
    assert type(got) is type(expected), f"{where}: {type(got).__name__} != {type(expected).__name__}"
    if isinstance(expected, torch.Tensor):
        assert torch.equal(got, expected), where
    elif isinstance(expected, dict):  # also a ModelOutput: keys in order
        assert list(got) == list(expected), where
        for key in expected:
            _assert_same(got[key], expected[key], f"{where}[{key!r}]")
    elif isinstance(expected, (list, tuple)):
        assert len(got) == len(expected), where
        for i, (g, e) in enumerate(zip(got, expected)):
            _assert_same(g, e, f"{where}[{i}]")
    else:
        assert got == expected, where


@pytest.mark.parametrize("name", sorted(STRUCTURES))
def test_nested_outputs_come_back_as_eager_returns_them(name: str) -> None:
    model, x = _Parent(STRUCTURES[name]).eval(), torch.randn(2, 4)
    rebuilt = ir2torch.convert(torch2ir.convert(model, (x,)), model.state_dict())
    with torch.no_grad():
        _assert_same(rebuilt(x), model(x))
        _assert_same(rebuilt.child(x), model.child(x), "child output")
    for module in (rebuilt, rebuilt.child):
        assert "tree_unflatten" not in module.code, module.code


def test_constant_leaves_are_literals_and_each_call_gets_its_own_mutable_containers() -> None:
    model, x = _Parent(_tuple_of_constants).eval(), torch.randn(2, 4)
    rebuilt = ir2torch.convert(torch2ir.convert(model, (x,)), model.state_dict())
    assert "(2, 8, )" in rebuilt.child.code, rebuilt.child.code
    assert rebuilt.child(x)[1] == (2, 8)
    model = _Parent(_deep).eval()
    rebuilt = ir2torch.convert(torch2ir.convert(model, (x,)), model.state_dict())
    first, second = rebuilt.child(x), rebuilt.child(x)
    first["a"].append("a caller's edit")
    assert first is not second and first["a"] is not second["a"] and len(second["a"]) == 2
    _assert_same(rebuilt.child(x), model.child(x))


def test_an_output_type_without_a_serialized_name_is_refused_naming_it() -> None:
    model, x = _Parent(lambda h: h.max(dim=1)).eval(), torch.randn(2, 4)  # a ``torch.return_types.max``
    with pytest.raises(IRSerializationError, match="return_types.max"):
        torch2ir.convert(model, (x,))

"""Validation walks each node's arguments once (``values.collect_refs``) and checks the bodies of higher-order ops
(names included) where that walk finds them; an IR changed after it was loaded is validated again and refused."""

from __future__ import annotations

from collections import namedtuple

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common import IR, Ref
from common import errors as E
from common.values import Subgraph, collect_refs, iter_refs, iter_values


class _NoGrad(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            y = torch.relu(x) * 2
        return self.lin(x) + y


def _ir_with_body() -> tuple[IR, dict]:
    ir = torch2ir.convert(_NoGrad().eval(), (torch.randn(2, 3),))
    for _, attrs in ir.root.graph.nodes(data=True):
        if attrs.get("implementation") == "higher_order.wrap_with_set_grad_enabled":
            return ir, attrs
    raise AssertionError("no higher-order op in the IR")


def _body(attrs: dict) -> Subgraph:
    return next(v for _, v in iter_values([attrs["args"], attrs["kwargs"]]) if isinstance(v, Subgraph))


def _function_node(body: Subgraph) -> dict:
    return next(a for _, a in body.impl.graph.nodes(data=True) if a.get("type") == "function")


def test_valid_body_passes():
    ir, _ = _ir_with_body()
    ir.validate()


@pytest.mark.parametrize(("change", "error", "fragment"), [
    (lambda fn: fn["kwargs"].update(__class__=1), E.UnsafeNameError, "__class__"),
    (lambda fn: fn.update(implementation="os.system"), E.UnsafeTargetError, "os.system"),
    (lambda fn: fn["args"].append(Ref("ghost")), E.ArgumentMismatchError, "no edge fills them"),
    (lambda fn: fn.update(type="get_attr"), E.UnknownNodeKindError, "subgraphs hold input, function and output"),
])
def test_bad_body_is_refused(change, error, fragment):
    ir, attrs = _ir_with_body()
    change(_function_node(_body(attrs)))
    with pytest.raises(error, match=fragment):
        ir.validate()


def test_bad_name_in_a_body_nested_in_a_body_is_refused():
    ir, attrs = _ir_with_body()
    _, inner_attrs = _ir_with_body()
    body = _body(attrs)
    inner = _body(inner_attrs)
    _function_node(inner)["kwargs"]["not an identifier"] = 1
    _function_node(body)["kwargs"]["nested"] = {"deeper": [inner]}  # in kwargs, inside a dict and a list
    with pytest.raises(E.UnsafeNameError, match="not an identifier"):
        ir.validate()


def test_body_in_kwargs_is_checked():
    ir, attrs = _ir_with_body()
    _, other = _ir_with_body()
    body = _body(other)
    _function_node(body).update(implementation="builtins.eval")
    attrs["kwargs"]["extra"] = (1, [body])
    with pytest.raises(E.UnsafeTargetError, match="builtins.eval"):
        ir.validate()


def test_a_ref_subclass_is_not_a_ref():
    class FakeRef(Ref):
        pass

    ir, _ = _ir_with_body()
    graph = ir.root.graph
    node = next(n for n, a in graph.nodes(data=True) if a.get("implementation") == "aten.add.Tensor")
    args = graph.nodes[node]["args"]
    args[0] = FakeRef(args[0].node, args[0].index)
    with pytest.raises(E.ArgumentMismatchError, match="refers to"):
        ir.validate()


Pair = namedtuple("Pair", "a b")


@pytest.mark.parametrize("value", [
    [Ref("a"), 1, [Ref("b", 0), (2, Ref("c"))], {"k": Ref("d"), "l": [3, {"m": Ref("e", 1)}]}],
    {"x": Pair(Ref("a"), [Ref("b")]), "y": None, "z": "s"},
    (Ref("a"),),
    [],
    {},
    [[[[Ref("deep")]]]],
    [Subgraph(None), {"s": Subgraph(None)}, Ref("r")],
])
def test_collect_refs_agrees_with_iter_refs_and_iter_values(value):
    refs: list = []
    bodies: list = []
    collect_refs(value, (), refs, bodies)
    assert refs == iter_refs(value)
    assert bodies == [v for _, v in iter_values(value) if isinstance(v, Subgraph)]
    assert all(a is b for a, b in zip(bodies, [v for _, v in iter_values(value) if isinstance(v, Subgraph)],
                                      strict=True))


def test_an_ir_changed_after_load_is_validated_again(tmp_path):
    ir, _ = _ir_with_body()
    path = ir.save(tmp_path / "m.ir.json")
    loaded = IR.load(path)
    node = next(n for n, a in loaded.root.graph.nodes(data=True) if a.get("implementation") == "aten.add.Tensor")
    loaded.root.graph.nodes[node]["implementation"] = "os.system"  # straight into networkx, no IR method
    with pytest.raises(E.UnsafeTargetError, match="os.system"):
        ir2torch.convert(loaded, device="meta")
    loaded = IR.load(path)
    body = _body(next(a for _, a in loaded.root.graph.nodes(data=True)
                      if a.get("implementation") == "higher_order.wrap_with_set_grad_enabled"))
    _function_node(body)["kwargs"]["__dict__"] = 0
    with pytest.raises(E.UnsafeNameError, match="__dict__"):
        ir2torch.convert(loaded, device="meta")

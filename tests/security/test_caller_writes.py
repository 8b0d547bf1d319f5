"""A rebuilt model never writes into its caller's tensors (:mod:`ir2torch.run_safety.writes`): a file whose graph
aims an in-place or ``out=`` operator at an input (or a view of one) is refused at the call, before the write,
with an ``IRError``; the caller's tensor keeps its values and size. In-place operators on the graph's own values,
which real conversions emit (``ReLU(inplace=True)``), run as before, and without a budget need no check op by
op (``foreign_writes`` tells them from writes that may reach the caller, by the operators' schemas)."""

from __future__ import annotations

import json
import operator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common.errors import IRError
from ir2torch.run_safety.forward_budget import BUDGET_ATTR
from ir2torch.run_safety.writes import foreign_writes, writes_in_place


class _InPlace(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        y.add_(1)
        return torch.relu_(y)


def _saved(tmp_path: Path) -> tuple[Path, dict]:
    path = torch2ir.convert(_InPlace(), (torch.randn(3),)).save(tmp_path / "m.ir.json")
    return path, json.loads(path.read_text())


def _planted(tmp_path: Path, doc: dict, node: dict) -> Path:
    """``doc`` with node ``add_`` replaced by ``node``'s fields, its in-edges made to fit its references."""
    root = doc["implementations"]["root"]
    root["nodes"]["add_"] = {**root["nodes"]["add_"], **node}
    planted = root["nodes"]["add_"]
    edges = [e for e in root["edges"] if e["dst"] != "add_"]
    for slot, value in [*enumerate(planted["args"]), *planted.get("kwargs", {}).items()]:
        if isinstance(value, dict) and "$ref" in value:
            edges.append({"src": value["$ref"], "dst": "add_", "slot": slot})
    root["edges"] = edges
    path = tmp_path / "hostile.ir.json"
    path.write_text(json.dumps(doc))
    return path


X = {"$ref": "x"}


@pytest.mark.parametrize("node", [
    {"args": [X, 1]},  # add_ on the input itself
    {"implementation": "aten.resize_.default", "args": [X, [100000]]},  # the caller's tensor resized
    {"implementation": "aten.zeros.out", "args": [[3]], "kwargs": {"out": X}},  # out= into the input
    {"implementation": "aten.fill_.Scalar", "args": [X, 7.0]},
    {"implementation": "aten.copy_.default", "args": [X, {"$ref": "mul"}]},
], ids=["add_", "resize_", "zeros.out", "fill_", "copy_"])
@pytest.mark.parametrize("max_bytes", ["available", None], ids=["probed", "checked"])
def test_a_write_into_the_callers_tensor_is_refused_before_it_happens(tmp_path, node, max_bytes) -> None:
    _, doc = _saved(tmp_path)
    model = ir2torch.convert(_planted(tmp_path, doc, node), max_bytes=max_bytes, max_flops=None,
                             allow=["aten::resize_", "aten::zeros.out"])  # outside the default surface
    x = torch.arange(3.0)
    with pytest.raises(IRError, match="shares memory with an input of the call") as info:
        model(x)
    assert info.value.node == "add_"
    assert torch.equal(x, torch.arange(3.0)) and x.untyped_storage().nbytes() == 12  # untouched, not resized


def test_in_place_ops_on_the_graphs_own_values_run_as_converted(tmp_path) -> None:
    path, _ = _saved(tmp_path)
    x = torch.randn(3)
    for max_bytes in ("available", None):
        model = ir2torch.convert(path, max_bytes=max_bytes, max_flops=None)
        assert torch.equal(model(x), _InPlace()(x.clone()))


def _graph(build: Any) -> torch.fx.Graph:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.output(build(graph, x))
    return graph


aten = torch.ops.aten


@pytest.mark.parametrize(("build", "foreign"), [
    (lambda g, x: g.call_function(aten.add_.Tensor, (x, 1)), True),  # the input itself
    (lambda g, x: g.call_function(aten.add_.Tensor, (g.call_function(aten.slice.Tensor, (x, 0, 0, 1)), 1)), True),
    (lambda g, x: g.call_function(aten.add_.Tensor, (g.call_module("sub", (x,)), 1)), True),  # a submodule's
    (lambda g, x: g.call_function(aten.add_.Tensor, (g.get_attr("weight"), 1)), True),  # a parameter
    (lambda g, x: g.call_function(aten.zeros.out, ([3],), {"out": x}), True),
    (lambda g, x: g.call_function(aten.add_.Tensor, (g.call_function(aten.mul.Tensor, (x, 2)), 1)), False),
    # a router's div_ of its topk values, an index_put_ into an empty_like (Mixtral's experts)
    (lambda g, x: g.call_function(aten.div_.Tensor, (g.call_function(operator.getitem, (
        g.call_function(aten.topk.default, (x, 2)), 0)), 3.0)), False),
    (lambda g, x: g.call_function(aten.index_put_.default, (g.call_function(
        aten.transpose.int, (g.call_function(aten.empty_like.default, (x,)), 0, 1)), [x], x)), False),
], ids=["input", "view-of-input", "submodule", "parameter", "out=input", "own", "topk", "empty_like-view"])
def test_writes_are_known_own_only_when_the_schemas_say_so(build: Any, foreign: bool) -> None:
    assert bool(foreign_writes(_graph(build))) is foreign


class _OwnWrites(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        values, _ = x.topk(2, dim=-1)
        values /= values.sum(dim=-1, keepdim=True)
        return values


def test_a_graph_writing_only_its_own_values_runs_without_a_budget_when_none_is_asked() -> None:
    x = torch.rand(4, 5)
    model = ir2torch.convert(torch2ir.convert(_OwnWrites(), (x,)), max_bytes=None, max_flops=None)
    assert any(writes_in_place(getattr(n.target, "overload", n.target)) for n in model.graph.nodes)
    assert BUDGET_ATTR not in model.__dict__  # not run op by op
    assert torch.equal(model(x), _OwnWrites()(x))
    planted = ir2torch.convert(torch2ir.convert(_InPlace(), (x,)), max_bytes=None, max_flops=None)
    assert BUDGET_ATTR not in planted.__dict__  # x * 2 then add_ and relu_ on it: its own values


def test_a_probe_of_a_transposed_input_does_not_let_a_write_through_a_contiguous_one(tmp_path) -> None:
    """``contiguous()`` of a transposed input copies it, of a contiguous one returns the input itself: a graph
    writing in place into ``x.contiguous()`` writes the caller's tensor only in the second case. A probe of the
    first (nothing written) must not let the second run: the strides are part of the probed signature, and the
    node writing in place tests its real argument at every call."""
    path = torch2ir.convert(_InPlace(), (torch.randn(3, 3),)).save(tmp_path / "m.ir.json")
    doc = json.loads(path.read_text())
    root = doc["implementations"]["root"]
    root["nodes"]["mul"].update(implementation="aten.contiguous.default", args=[X])
    root["edges"] = [e for e in root["edges"] if not (e["dst"] == "mul" and e.get("slot") == 1)]
    path = tmp_path / "hostile.ir.json"
    path.write_text(json.dumps(doc))
    for max_bytes in ("available", None):
        model = ir2torch.convert(path, max_bytes=max_bytes, max_flops=None)
        transposed = torch.randn(3, 3).t()
        before = transposed.clone()
        model(transposed)  # a copy is written
        assert torch.equal(transposed, before)
        x = torch.zeros(3, 3)
        with pytest.raises(IRError, match="shares memory with an input of the call"):
            model(x)
        assert torch.equal(x, torch.zeros(3, 3))

"""``common.equal`` / ``common.differences``: IR equality up to chosen fields, for users checking their own loop."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import common
import ir2torch
import torch2ir
from common.flat import FlatIR
from common.ir import IR
from common.rewrite import fold_batchnorm


def _model() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 4 * 4, 2))
    model[1].running_mean.uniform_(-1, 1)
    model[1].running_var.uniform_(0.5, 2)
    return model.eval()


X = torch.randn(1, 3, 6, 6)


def _copy(ir: IR) -> IR:
    return IR.from_dict(copy.deepcopy(ir.to_dict()))


def test_a_rewritten_model_converts_back_to_its_ir_up_to_the_rewrite_history():
    """The loop after a rewrite: the re-converted IR lacks only ``meta.provenance`` (no model records it)."""
    model = _model()
    folded, state = fold_batchnorm(torch2ir.convert(model, (X,)), model.state_dict())
    rebuilt = ir2torch.convert(folded, state)
    again = torch2ir.convert(rebuilt, (X,))
    assert again != folded
    assert not common.equal(again, folded)
    lines = common.differences(folded, again)
    assert lines and all("meta.provenance" in line for line in lines), lines
    assert common.equal(again, folded, ignore=("provenance",))
    assert common.equal(again, folded, ignore=("meta.provenance",))
    assert common.differences(folded, again, ignore=("provenance",)) == []


def test_ignoring_one_field_still_reports_the_others():
    ir = torch2ir.convert(_model(), (X,))
    other = _copy(ir)
    assert common.equal(ir, other) and common.differences(ir, other) == []
    other["root"].meta["provenance"] = [{"pass": "mine", "from": []}]
    relu = next(n for n in other["root"].nodes if other["root"].node(n)["type"] == "relu")
    other["root"].node(relu)["meta"] = {"shape": [9], "dtype": torch.float32}
    assert not common.equal(ir, other, ignore=("provenance",))
    lines = common.differences(ir, other, ignore=("provenance",))
    assert lines == [f'~ root: nodes.{relu}.meta.shape: [1, 4, 4, 4] -> [9]'], lines
    assert common.equal(ir, other, ignore=("provenance", "nodes.*.meta"))
    assert common.equal(ir, other, ignore=("meta",))  # a dotless pattern matches any component
    assert not common.equal(ir, other, ignore=("nodes.*.meta.dtype", "provenance"))


def test_missing_implementations_and_types_are_listed():
    ir = torch2ir.convert(_model(), (X,))
    other = _copy(ir)
    del other["4"]
    lines = common.differences(ir, other)
    assert "- 4 (linear)" in lines
    assert common.differences(other, ir)[0] == "+ 4 (linear)"
    assert not common.equal(ir, other, ignore=("nodes", "edges"))  # a missing implementation is no field


def test_carried_tensors_are_compared_by_value():
    ir = torch2ir.convert(_model(), (X,))
    a, b = _copy(ir), _copy(ir)
    a.tensors["t"] = torch.zeros(3)
    b.tensors["t"] = torch.tensor([0.0, 0.0, 1.0])
    assert a != b and not common.equal(a, b)
    assert common.differences(a, b) == ["~ tensors.t: torch.float32 [3] -> torch.float32 [3] (values differ)"]
    assert common.equal(a, b, ignore=("tensors.t",))


def test_flat_irs_compare_too_and_mixed_kinds_are_refused():
    flat = torch2ir.convert(_model(), (X,)).lower()
    other = FlatIR.from_dict(copy.deepcopy(flat.to_dict()))
    assert common.equal(flat, other)
    node = other.nodes[0]
    node.module_path = "elsewhere"
    lines = common.differences(flat, other)
    assert lines == [f'~ nodes.{node.name}.module_path: "{flat.nodes[0].module_path}" -> "elsewhere"'], lines
    assert common.equal(flat, other, ignore=("module_path",))
    with pytest.raises(TypeError, match="two IRs or two FlatIRs"):
        common.equal(flat, torch2ir.convert(_model(), (X,)), ignore=("x",))

"""Every rewrite of common.rewrite leaves the shape and dtype of what each new node computes, as a conversion records
them: checked on each public rewrite (passes, primitives, inline, replace_pattern with one output and several)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import ir2torch
import torch2ir
from common.rewrite import (
    NodeRef,
    find,
    fold_batchnorm,
    fuse_qkv,
    inline,
    insert_after,
    insert_after_type,
    remove,
    remove_types,
    rename_implementation,
    reparameterize,
    replace,
    replace_pattern,
    replace_type,
)
from tests.rewrite.helpers import corpus_model, nodes_without_meta, randomize_batchnorms
from tests.rewrite.test_pattern_outputs import _examples, fused_qkv, qkv


class Net(nn.Module):
    """A convolution + batch norm, a dropout, a RepVGG-like sum of branches, a Linear, a child with a graph."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn = nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4)
        self.one, self.one_bn = nn.Conv2d(4, 4, 1), nn.BatchNorm2d(4)
        self.drop = nn.Dropout(0.1)
        self.gate = Gate()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        y = self.bn(self.conv(x)) + self.one_bn(self.one(x))
        y = self.drop(torch.relu(y) * torch.sigmoid(y))
        return self.fc(self.gate(y.mean((2, 3))))


class Gate(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(x)


def _net() -> tuple[nn.Module, torch.Tensor, Any]:
    torch.manual_seed(0)
    model = Net()
    randomize_batchnorms(model)
    model.eval()
    x = torch.randn(2, 4, 6, 6)
    return model, x, torch2ir.convert(model, (x,))


def _conv(ir):
    return find(ir, ["conv2d"])[0].nodes[0]


REWRITES: dict[str, Callable[[Any, dict[str, torch.Tensor]], Any]] = {
    "fold_batchnorm": lambda ir, s: fold_batchnorm(ir, s),
    "fold_batchnorm_into_next": lambda ir, s: fold_batchnorm(ir, s, into_next=True),
    "reparameterize": lambda ir, s: reparameterize(ir, s),
    "remove_types": lambda ir, s: remove_types(ir, s),
    "replace_type": lambda ir, s: replace_type(ir, s, type="dropout", new_type="identity", data={}),
    "insert_after_type": lambda ir, s: insert_after_type(ir, s, "conv2d", type="identity", data={}),
    "insert_after": lambda ir, s: insert_after(ir, s, _conv(ir), type="identity", data={}),
    "remove": lambda ir, s: remove(ir, s, find(ir, ["dropout"])[0].nodes[0]),
    "replace": lambda ir, s: replace(ir, s, find(ir, ["conv2d", "batchnorm2d"])[0], type="conv2d", key="conv",
                                     state_fn=lambda o: {"weight": o["conv.weight"], "bias": o["conv.bias"]},
                                     data=dict(ir["conv"].data)),
    "replace_node": lambda ir, s: replace(ir, s, NodeRef("root", "fc"), type="linear", key="head",
                                          state_fn=lambda o: {"weight": o["fc.weight"], "bias": o["fc.bias"]},
                                          data=dict(ir["fc"].data)),
    "rename_implementation": lambda ir, s: (rename_implementation(ir, "fc", "head"), None),
    "inline": lambda ir, s: inline(ir, s, NodeRef("root", "gate")),
    "replace_pattern": lambda ir, s: replace_pattern(ir, s, lambda v: v * torch.sigmoid(v), F.silu),
    "replace_pattern_two_outputs": lambda ir, s: replace_pattern(
        ir, s, lambda v: (torch.relu(v), torch.sigmoid(v)), lambda v: (torch.relu(v) + 0, torch.sigmoid(v))),
}


@pytest.mark.parametrize("name", sorted(REWRITES))
def test_every_new_node_records_its_shape_and_dtype(name):
    model, x, ir = _net()
    result = REWRITES[name](ir, model.state_dict())
    new_ir = result[0]
    assert new_ir is not None and not (new_ir == ir and name != "rename_implementation"), name
    assert nodes_without_meta(ir, new_ir) == []
    state = result[1] if result[1] is not None else model.state_dict()
    rebuilt = ir2torch.convert(new_ir, state)
    assert rebuilt(x).shape == model(x).shape


def test_fuse_qkv_and_the_qkv_pattern_on_bert():
    model, _, _, ir = corpus_model("bert")
    assert nodes_without_meta(ir, fuse_qkv(ir, model.state_dict()).ir) == []
    pattern = replace_pattern(ir, model.state_dict(), qkv, fused_qkv, example_inputs=_examples(3, True))
    assert pattern.count == 2 and nodes_without_meta(ir, pattern.ir) == []


def test_the_check_finds_a_new_node_without_its_shape():
    model, _, ir = _net()
    result = REWRITES["replace_pattern_two_outputs"](ir, model.state_dict())
    assert nodes_without_meta(ir, result.ir) == []
    graph = result.ir["root"]
    (added,) = [n for n in graph.nodes if n not in ir["root"].nodes]  # relu + 0: the add is new
    del graph.node(added)["meta"]
    assert nodes_without_meta(ir, result.ir) == [f"root: {added}"]

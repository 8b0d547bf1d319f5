"""Order is part of an IR: ``==``, ``differences`` (``ir2torch diff``) and the saved bytes agree on two IRs holding
the same nodes, or the same implementations, in another order."""

from __future__ import annotations

import copy

import torch
from torch import nn

import torch2ir
from common.compare import differences, equal
from common.ir import IR
from common.rewrite.core import ordered, rebuild_graph


class Two(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        return self.a(x) + self.b(x)


def _agree(x: IR, y: IR, tmp_path) -> list[str]:
    x.save(tmp_path / "x.ir.json")
    y.save(tmp_path / "y.ir.json")
    same_bytes = (tmp_path / "x.ir.json").read_bytes() == (tmp_path / "y.ir.json").read_bytes()
    lines = differences(x, y)
    assert (x == y) == (not lines) == equal(x, y) == same_bytes, (x == y, lines, same_bytes)
    return lines


def test_node_order_counts_everywhere(tmp_path):
    ir = torch2ir.convert(Two().eval(), (torch.randn(2, 4),))
    assert _agree(ir, copy.deepcopy(ir), tmp_path) == []
    swapped = copy.deepcopy(ir)
    nodes, edges = ordered(swapped["root"])
    names = [n for n, _ in nodes]
    i, j = names.index("a"), names.index("b")
    nodes[i], nodes[j] = nodes[j], nodes[i]
    rebuild_graph(swapped["root"], nodes, edges)
    lines = _agree(ir, swapped, tmp_path)
    assert lines == ['~ root: node_order: ["a", "b", "add", "output"] -> ["b", "a", "add", "output"] (from position 1)']
    assert differences(ir, swapped, ignore=("node_order",)) == []


def test_implementation_order_counts_everywhere(tmp_path):
    ir = torch2ir.convert(Two().eval(), (torch.randn(2, 4),))
    moved = IR([ir[k] for k in ("root", "b", "a")])
    moved.tensors = ir.tensors
    lines = _agree(ir, moved, tmp_path)
    assert lines == ['~ order: ["a", "b"] -> ["b", "a"] (from position 1)']

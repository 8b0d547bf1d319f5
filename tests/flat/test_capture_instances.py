"""The capture's seal on an IR whose alike blocks were traced once: sealing expands no instance, an instance
expanded since (and left alone) still lowers, and every change of an instance, expanded or not, or of the body it
shares, is refused as stale."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from torch import nn

import torch2ir
from common.ir import IR
from torch2ir.lowering.capture import StaleCaptureError


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.lin(x)) * 2 + x


def _converted() -> tuple[IR, list[str]]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), *[_Block() for _ in range(4)]).eval()
    ir = torch2ir.convert(model, (torch.randn(2, 8),))
    instances = [k for k, impl in ir.items() if impl.body is not None]
    return ir, instances


def test_sealing_expands_no_instance() -> None:
    ir, instances = _converted()
    assert instances == ["2", "2.lin", "3", "3.lin", "4", "4.lin"]  # traced once in "1": instances of it
    ir.lower()
    assert [k for k, impl in ir.items() if impl.body is not None] == instances  # lowering checked, expanded none


def test_an_instance_expanded_and_left_alone_still_lowers() -> None:
    ir, instances = _converted()
    expected = ir.lower()
    for key in instances[:3]:
        _ = ir[key].graph  # expands it
    assert ir["2"].body is None
    assert ir.lower() == expected
    copied = copy.deepcopy(ir)  # a copy's instances share copies of the bodies
    assert copied.lower() == expected


def _edit_expanded_graph(ir: IR) -> None:
    impl = ir["3"]
    name = next(n for n, a in impl.graph.nodes(data=True) if a.get("implementation") == "aten.mul.Tensor")
    impl.node(name)["args"] = [impl.node(name)["args"][0], 3]


def _edit_instance_meta(ir: IR) -> None:
    ir["4"].meta["note"] = "changed"


def _edit_instance_state(ir: IR) -> None:
    ir["4.lin"].state["weight"]["dtype"] = torch.float64


def _edit_shared_body(ir: IR) -> None:
    body = ir["2"].shared_body
    assert body is not None
    name = next(n for n, a in body.graph.nodes(data=True) if a.get("implementation") == "aten.mul.Tensor")
    body.node(name)["args"] = [body.node(name)["args"][0], 3]


def _edit_body_then_expand(ir: IR) -> None:
    _edit_shared_body(ir)
    _ = ir["2"].graph


@pytest.mark.parametrize("edit", [_edit_expanded_graph, _edit_instance_meta, _edit_instance_state, _edit_shared_body,
                                  _edit_body_then_expand])
def test_a_changed_instance_or_body_is_refused(edit: Callable[[IR], None]) -> None:
    ir, _ = _converted()
    edit(ir)
    with pytest.raises(StaleCaptureError, match="changed after its conversion"):
        ir.lower()

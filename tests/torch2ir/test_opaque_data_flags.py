"""A Python value read from data and passed down (issue 49, Longformer's ``is_global_attn``): the module computing
it is kept opaque, and the blocks it passes the value to are traced on their own for the value the eager call gave
them, guarded: a rebuild called so that the value differs raises ``InputMismatchError``, never runs the other
branch's graph.

Before, ``opaque="auto"`` made every class on the way up opaque (the block that failed on the value, then each
caller passing it on), and those classes stayed opaque below the module that computes the value, where they get a
plain constant and trace: here both blocks, all but the embedding and head.
"""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common.errors import InputMismatchError
from common.opaque import traced_alone
from torch2ir.opaque.children import graft


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.gate = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, use_gate: bool) -> torch.Tensor:
        y = nn.functional.dropout(self.lin(x), p=0.1, training=self.training)
        if use_gate:  # a branch on a Python flag: export cannot trace it when the flag is read from data
            y = y * torch.sigmoid(self.gate(x))
        return y


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        use_gate = mask.flatten().any().item()  # as Longformer's encoder computes is_global_attn
        for block in self.blocks:
            x = block(x, use_gate)
        return x


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 4)
        self.encoder = Encoder()
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(x), mask))


X = torch.randn(3, 4)
OFF, ON = torch.zeros(3, dtype=torch.bool), torch.tensor([False, True, False])
ENCODER = f"{__name__}.Encoder"


def _model() -> Model:
    torch.manual_seed(0)
    return Model().eval()


def _run(module: nn.Module, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return module(x, mask)


@pytest.mark.parametrize(("seen", "other"), [(OFF, ON), (ON, OFF)])
def test_only_the_module_computing_the_value_is_opaque_its_blocks_are_traced_and_guarded(
        seen: torch.Tensor, other: torch.Tensor) -> None:
    model = _model()
    ir = torch2ir.convert(model, (X, seen), opaque="auto")
    assert [(path, cls) for path, cls, _ in ir.capture.opaque] == [("encoder", ENCODER)]
    # why: its blocks' flag is read from data (found first or as the blocks' failure in its trace alone)
    assert re.search(r"value computed from tensor data|encoder\.blocks\.0 \(Block\) traces on its own",
                     ir.capture.opaque[0][2])
    assert traced_alone(ir) == ["encoder.blocks.0", "encoder.blocks.1"]
    assert ir["encoder.blocks.0.gate"].type == "linear"
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=[ENCODER])
    for x in (X, 2 * X + 1):  # other data, the same flag: the traced graph, exact
        assert torch.equal(_run(rebuilt, x, seen), _run(model, x, seen))
    # the flag the blocks were traced for is guarded: the other one is refused, not run on the wrong graph
    with pytest.raises(InputMismatchError, match="use_gate"):
        _run(rebuilt, X, other)
    assert torch2ir.convert(rebuilt, (X, seen), opaque="auto") == ir


def test_a_class_named_in_opaque_stays_opaque_below_the_caller() -> None:
    """Only the classes ``"auto"`` made opaque for the value they were passed are traced again below it."""
    model = _model()
    ir = torch2ir.convert(model, (X, OFF), opaque=["auto", Block])
    assert [path for path, _, _ in ir.capture.opaque] == ["encoder", "encoder.blocks.0", "encoder.blocks.1"]
    assert traced_alone(ir) == []
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=[ENCODER, f"{__name__}.Block"])
    for mask in (OFF, ON):  # the real blocks run: both flags
        assert torch.equal(_run(rebuilt, X, mask), _run(model, X, mask))


def test_a_childs_notes_are_grafted_once() -> None:
    """Converting a rebuilt model grafts the same children below a root that carries the original's notes: each
    child's note is added once, not again."""
    model = _model()
    ir = torch2ir.convert(model, (X, OFF), opaque="auto")
    sub = torch2ir.convert(model.encoder.blocks[0], (X, False))
    sub.root.meta["train_trace"] = "failed: one; two"
    sub.root.meta["train_buffers"] = ["lin.seen"]
    graft(ir, "encoder.blocks.0", sub)
    notes = dict(ir.root.meta)
    graft(ir, "encoder.blocks.0", sub)
    assert notes["train_trace"].endswith("encoder.blocks.0: failed: one; two")
    assert ir.root.meta["train_trace"] == notes["train_trace"]
    assert ir.root.meta["train_buffers"] == notes["train_buffers"] == ["encoder.blocks.0.lin.seen"]


class Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.scale = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * self.scale  # a plain attribute: a constant of a graph traced for one call


class Setter(nn.Module):
    """Sets a value read from data on its block before calling it (its own code does not trace)."""

    def __init__(self) -> None:
        super().__init__()
        self.block = Scaled()

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        self.block.scale = float(mask.sum())
        return self.block(x) if mask.any() else x


def test_a_child_whose_attribute_the_opaque_leaf_sets_stays_opaque() -> None:
    """Traced on its own, the block's graph would hold the scale of the eager call, and a rebuild would ignore the
    one the opaque leaf sets: the write is watched like a read, and the block stays opaque."""
    torch.manual_seed(0)
    model = Setter().eval()
    ir = torch2ir.convert(model, (X, ON), opaque="auto")
    kept = {path: why for path, _, why in ir.capture.opaque}
    assert set(kept) == {"", "block"} and "sets block.scale" in kept["block"]
    assert traced_alone(ir) == []
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=[f"{__name__}.Setter", f"{__name__}.Scaled"])
    twice = torch.tensor([True, True, False])
    for mask in (ON, twice):
        assert torch.equal(_run(rebuilt, X, mask), _run(model, X, mask))

"""A module whose calls trace to different graphs keeps one graph per distinct call.

The IR gives the implementation ``variants`` (further graphs) and each call node that runs one of them a
``variant`` index; the rebuilt parent selects it right before the call. Outputs are exact, the JSON round
trip keeps the variants, and the rebuilt model converts back to the same IR.
"""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common import IR
from common import errors as E
from common.testing import assert_roundtrip


class Gate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, flag: bool) -> torch.Tensor:
        return torch.relu(self.lin(x)) if flag else torch.sigmoid(self.lin(x)) * 2


class FlagTwice(nn.Module):
    """``N(x, True)`` then ``N(x, False)``: same inputs, two graphs."""

    def __init__(self) -> None:
        super().__init__()
        self.n = Gate()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.n(x, True) + self.n(x, False)


class Pool(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1).mean(-1, keepdim=True) * x.shape[-1]


class TwoShapes(nn.Module):
    """One module applied to inputs of two shapes (a positional encoding shared across stages)."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = Pool()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.pool(a) + self.pool(b)


class Parent(nn.Module):
    def __init__(self, shared: nn.Module, flag: bool) -> None:
        super().__init__()
        self.shared = shared
        self.flag = flag

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.shared(x, self.flag) + 1


class TwoParents(nn.Module):
    """One module shared between two parents, each calling it its own way."""

    def __init__(self) -> None:
        super().__init__()
        gate = Gate()
        self.left = Parent(gate, True)
        self.right = Parent(gate, False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.left(x) * self.right(x)


CASES = {
    "flag": (FlagTwice, lambda: (torch.randn(2, 4),), "n"),
    "shapes": (TwoShapes, lambda: (torch.randn(2, 3, 4), torch.randn(2, 5, 6)), "pool"),
    "parents": (TwoParents, lambda: (torch.randn(2, 4),), "left.shared"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_distinct_call_gets_its_graph_and_runs_exactly(name: str) -> None:
    cls, inputs, key = CASES[name]
    torch.manual_seed(0)
    model = cls().eval()
    args = inputs()
    ir, rebuilt, report = assert_roundtrip(model, args, {})
    assert report.max_abs_diff == 0.0, report
    assert len(ir[key].variants) == 1
    calling = [(impl.name, n) for impl in ir.values() for g in impl.graphs()
               for n, a in g.graph.nodes(data=True) if a.get("variant")]
    assert len(calling) == 1  # the second distinct call names variant 1; the first runs the main graph
    again = torch2ir.convert(rebuilt, args)
    assert again == ir


def test_variants_survive_the_json_file(tmp_path) -> None:
    model = FlagTwice().eval()
    x = torch.randn(2, 4)
    ir = torch2ir.convert(model, (x,))
    ir.save(tmp_path / "m.ir.json")
    doc = json.loads((tmp_path / "m.ir.json").read_text())
    assert len(doc["implementations"]["n"]["variants"]) == 1
    loaded = IR.load(tmp_path / "m.ir.json")
    assert loaded == ir
    assert torch.equal(ir2torch.convert(loaded, model.state_dict())(x), model(x))


def test_a_variant_index_out_of_range_is_refused() -> None:
    ir = torch2ir.convert(FlagTwice().eval(), (torch.randn(2, 4),))
    node = next(n for n, a in ir.root.graph.nodes(data=True) if a.get("variant"))
    ir.root.graph.nodes[node]["variant"] = 5
    with pytest.raises(E.IRValidationError, match="variant 5"):
        ir.validate()


def test_a_builder_type_with_variants_is_refused() -> None:
    ir = torch2ir.convert(FlagTwice().eval(), (torch.randn(2, 4),))
    ir["n.lin"].add_variant()
    with pytest.raises(E.BuildError, match="per-call graphs"):
        ir2torch.convert(ir)


class DropIn(nn.Module):
    def forward(self, x: torch.Tensor, p: float) -> torch.Tensor:
        return torch.nn.functional.dropout(x, p, self.training) * 2


class DropVariants(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.d = DropIn()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.d(x, 0.1) + self.d(x, 0.2)


def test_per_call_graphs_holding_dropout_are_refused_by_name() -> None:
    """Train mode is matched on a module's first call only: a variant with dropout would silently differ."""
    with pytest.raises(E.ConversionError, match="d: module is called 2 times.*holds dropout"):
        torch2ir.convert(DropVariants().eval(), (torch.randn(2, 4),))

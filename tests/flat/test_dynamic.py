"""Dynamic batch and sequence sizes: symbols and ranges recorded, one FlatIR run at several sizes."""

from __future__ import annotations

from functools import cache

import pytest
import torch
from torch.export import Dim

import ir2torch
import torch2ir
from common import FlatIR
from tests.flat.cases import built, full_state, meta_model, to_meta
from tests.helpers import max_abs_diff


@cache
def _dynamic_bert(decompose: bool) -> FlatIR:
    b = built("bert")
    batch, seq = Dim("batch", min=1, max=16), Dim("seq", min=2, max=32)
    shapes = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
    return torch2ir.lower(meta_model("bert"), to_meta(b.args), to_meta(b.kwargs), decompose=decompose,
                          dynamic_shapes=shapes)


def test_symbols_and_ranges_are_recorded():
    flat = _dynamic_bert(False)
    ids, mask = flat.graph_inputs
    batch, seq = ids.shape
    assert isinstance(batch, str) and isinstance(seq, str) and batch != seq
    assert mask.shape == [batch, seq]
    assert flat.range_constraints[batch] == [1, 16]
    assert flat.range_constraints[seq] == [2, 32]
    hidden = flat.graph_outputs[0]
    assert hidden.shape == [batch, seq, 64]
    symbolic = [n for n in flat.nodes if any(isinstance(d, str) for o in n.outputs if o.kind == "tensor"
                                             for d in o.shape)]
    assert len(symbolic) > len(flat.nodes) // 2


@pytest.mark.parametrize("decompose", [False, True], ids=["aten", "core_aten"])
def test_one_flat_module_runs_at_two_sizes(tmp_path, decompose):
    b = built("bert")
    flat = FlatIR.load(_dynamic_bert(decompose).save(tmp_path / "dyn.flat.json"))  # symbols survive the file
    assert flat == _dynamic_bert(decompose)
    module = ir2torch.convert(flat, full_state(b.model))
    generator = torch.Generator().manual_seed(1)
    for batch, seq in ((2, 8), (3, 5), (1, 17)):
        ids = torch.randint(0, 100, (batch, seq), generator=generator)
        mask = torch.ones(batch, seq, dtype=torch.long)
        mask[0, seq - 2 :] = 0
        with torch.no_grad():
            expected = b.model(ids, attention_mask=mask)
            out = module(ids, attention_mask=mask)
        assert out.last_hidden_state.shape == (batch, seq, 64)
        assert max_abs_diff(expected, out) <= 1e-5


def test_symbolic_arithmetic_nodes_are_recorded_with_symbol_outputs():
    flat = _dynamic_bert(True)
    arithmetic = [n for n in flat.nodes if n.op_type.startswith("operator.")]
    assert arithmetic, "the decomposed graph computes sizes from the symbols"
    for node in arithmetic:
        assert list(node.args) == [f"arg{i}" for i in range(len(node.args))]
        assert node.outputs[0].kind == "symbol" and node.outputs[0].sym


class _Lengths(torch.nn.Module):
    """XLM's and FlauBERT's mask: an unbacked size (``.item()``) bounded above only, so export records its lower
    bound as ``-int_oo`` (torch's own infinity, which ``int()`` cannot convert)."""

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        lengths = (ids != 0).sum(dim=1)
        torch._check(lengths.max().item() <= ids.shape[1])  # XLM's assert (pytest rewrites an assert here)
        return (torch.arange(ids.shape[1]) < lengths[:, None]).float() * 2


def test_unbounded_symbolic_ranges_are_recorded_and_rebuild_exactly():
    model, ids = _Lengths(), torch.tensor([[1, 2, 0, 0], [3, 0, 0, 0]])
    ir, flat = torch2ir.convert(model, (ids,)), torch2ir.lower(model, (ids,))
    for ranges in (ir["root"].meta["range_constraints"], flat.range_constraints):
        (bounds,) = ranges.values()
        assert bounds == ["-int_oo", 4]
    for rebuilt in (ir2torch.convert(ir, {}), ir2torch.convert(flat, {})):
        assert torch.equal(rebuilt(ids), model(ids))


@pytest.mark.parametrize("value, expected", [(5, 5), ("int_oo", "int_oo"), ("-int_oo", "-int_oo"), ("oo", "int_oo"),
                                             ("-oo", "-int_oo")])
def test_range_bounds_of_every_kind_export_writes(value, expected):
    import sympy
    from torch.utils._sympy.numbers import int_oo

    from torch2ir.hierarchy.tensormeta import range_bound

    real = {"int_oo": int_oo, "-int_oo": -int_oo, "oo": sympy.oo, "-oo": -sympy.oo}.get(value, sympy.Integer(5))
    assert range_bound(real) == expected


def test_a_range_bound_that_is_not_an_integer_is_a_conversion_error():
    import sympy

    from common.errors import ConversionError
    from torch2ir.hierarchy.tensormeta import range_bound

    with pytest.raises(ConversionError, match="3/2"):
        range_bound(sympy.Rational(3, 2))

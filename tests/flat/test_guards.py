"""Input guards of executed FlatIRs: other shapes, dtypes, ranges or structure than lowered are refused by name."""

from __future__ import annotations

from functools import cache

import pytest
import torch
from torch import nn
from torch.export import Dim

import ir2torch
import torch2ir
from common import FlatIR
from common.errors import InputMismatchError
from tests.flat.cases import built, full_state, lowered, meta_model, to_meta
from tests.helpers import max_abs_diff


class _Pair(nn.Module):
    """A batch-baked reshape, a nested pair and a flag."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, pair: tuple, flag: bool = True) -> torch.Tensor:
        y = self.fc(x * pair[0] + pair[1]).reshape(x.shape[0], -1)
        return y.sum(-1) if flag else y.mean(-1)


@cache
def _pair() -> tuple[nn.Module, FlatIR, tuple, dict]:
    torch.manual_seed(0)
    model = _Pair().eval()
    args = (torch.randn(2, 8), (torch.randn(8), torch.randn(1)))
    kwargs = {"flag": True}
    return model, torch2ir.lower(model, args, kwargs), args, kwargs


def _raises(fn, *fragments: str, key: str) -> None:
    with pytest.raises(InputMismatchError) as info:
        fn()
    for fragment in fragments:
        assert fragment in str(info.value), str(info.value)
    assert info.value.key == key and info.value.hint


def test_lowered_shapes_run_exactly_and_others_are_refused() -> None:
    model, flat, args, kwargs = _pair()
    run = ir2torch.convert(flat, model.state_dict())
    assert max_abs_diff(model(*args, **kwargs), run(*args, **kwargs)) == 0.0
    pair = args[1]
    _raises(lambda: run(torch.randn(4, 8), pair, flag=True), "(4, 8)", "(2, 8)", "dim 0 is 4, not 2", key="x")
    _raises(lambda: run(args[0].double(), pair, flag=True), "torch.float64", "torch.float32", key="x")
    _raises(lambda: run(args[0], (pair[0], torch.randn(2)), flag=True), "(2,)", "(1,)", key="pair[1]")
    _raises(lambda: run(args[0], pair, flag=False), "constant True", key="flag")
    # unguarded, the same wrong batch runs and regroups 4 rows into 2
    unguarded = ir2torch.convert(flat, model.state_dict(), guard_inputs=False)
    assert "check_inputs" not in unguarded.code
    assert unguarded(torch.randn(4, 8), pair, flag=True).shape == (2,)


def test_structure_is_checked_before_flattening() -> None:
    model, flat, args, _ = _pair()
    run = ir2torch.convert(flat, model.state_dict())
    _raises(lambda: run(args[0], pair=args[1]), "missing argument(s) 'flag'", key="flag")
    _raises(lambda: run(*args, True, 1), "4 positional arguments", key="args[3]")
    _raises(lambda: run(args[0], (*args[1], torch.ones(1)), flag=True), "pytree structure", key="pair")


def test_flat_file_keeps_the_guard(tmp_path) -> None:
    model, flat, args, kwargs = _pair()
    path = flat.save(tmp_path / "m.flat.json")
    run = ir2torch.convert(path, model.state_dict())
    assert max_abs_diff(model(*args, **kwargs), run(*args, **kwargs)) == 0.0
    _raises(lambda: run(torch.randn(3, 8), args[1], flag=True), "(3, 8)", key="x")


def test_real_bert_static_refuses_another_sequence_length() -> None:
    b = built("bert")
    run = ir2torch.convert(lowered("bert"), full_state(b.model))
    ids, mask = b.args[0], b.kwargs["attention_mask"]
    with torch.no_grad():
        assert max_abs_diff(b.expected, run(ids, attention_mask=mask)) < 1e-5
    _raises(lambda: run(ids[:, :5], attention_mask=mask[:, :5]), "(2, 5)", "(2, 8)", key="input_ids")


@cache
def _dynamic_bert() -> FlatIR:
    b = built("bert")
    batch, seq = Dim("batch", min=1, max=4), Dim("seq", min=2, max=16)
    shapes = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
    return torch2ir.lower(meta_model("bert"), to_meta(b.args), to_meta(b.kwargs), dynamic_shapes=shapes)


@pytest.mark.parametrize(("batch", "seq"), [(1, 2), (3, 11), (4, 16)])
def test_dynamic_in_range_runs_like_the_original(batch: int, seq: int) -> None:
    b = built("bert")
    run = ir2torch.convert(_dynamic_bert(), full_state(b.model))
    ids = torch.randint(0, 100, (batch, seq))
    mask = torch.ones(batch, seq, dtype=torch.long)
    with torch.no_grad():
        assert max_abs_diff(b.model(ids, attention_mask=mask), run(ids, attention_mask=mask)) < 1e-5


def test_dynamic_out_of_range_and_disagreeing_sizes_are_refused() -> None:
    b = built("bert")
    run = ir2torch.convert(_dynamic_bert(), full_state(b.model))
    ids = torch.randint(0, 100, (5, 8))
    _raises(lambda: run(ids, attention_mask=torch.ones(5, 8, dtype=torch.long)), "dim 0 of 'input_ids' is 5",
            "outside the range [1, 4]", key="input_ids")
    _raises(lambda: run(ids[:3], attention_mask=torch.ones(3, 7, dtype=torch.long)),
            "dim 1 of 'attention_mask' is 7, but dim 1 of 'input_ids' is 8", key="attention_mask")

"""Input guards of rebuilt roots: a call with other shapes, dtypes or structure than converted is refused by name."""

from __future__ import annotations

import copy
import re
from functools import cache

import pytest
import torch
from torch import fx, nn
from torch.export import Dim

import ir2torch
import torch2ir
from common.errors import InputMismatchError, IRError
from common.ir import IR
from ir2torch.guards.check import InputGuard
from ir2torch.guards.specs import DimExpr
from tests.flat.cases import built
from tests.helpers import max_abs_diff


class _Flatten(nn.Module):
    """``reshape(x.shape[0], -1)``: export bakes the batch in, so another batch is silently regrouped."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.fc(x * mask).reshape(x.shape[0], -1).sum(-1)


class _Options(nn.Module):
    """A flag the trace specialises on, a nested pair, and an optional tensor given as None."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, flag: bool = True, pair: tuple | None = None,
                extra: torch.Tensor | None = None) -> torch.Tensor:
        y = self.fc(x)
        y = y + 1 if flag else y - 1
        if pair is not None:
            y = y * pair[0] + pair[1]
        return y if extra is None else y + extra


def _rebuilt(model: nn.Module, args: tuple, kwargs: dict | None = None, **options: object) -> nn.Module:
    ir = torch2ir.convert(model, args, kwargs, dynamic_shapes=options.pop("dynamic_shapes", None))
    return ir2torch.convert(ir, model.state_dict(), **options)  # type: ignore[arg-type]


@cache
def _flatten() -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    model = _Flatten().eval()
    return model, _rebuilt(model, (torch.randn(2, 8), torch.ones(2, 8)))


def _raises(fn, *fragments: str, key: str | None = None) -> InputMismatchError:
    with pytest.raises(InputMismatchError) as info:
        fn()
    text = str(info.value)
    for fragment in fragments:
        assert fragment in text, text
    if key is not None:
        assert info.value.key == key
    assert isinstance(info.value, IRError) and info.value.hint
    return info.value


def test_converted_shapes_run_exactly() -> None:
    model, new = _flatten()
    x, mask = torch.randn(2, 8), torch.rand(2, 8)
    assert max_abs_diff(model(x, mask), new(x, mask)) == 0.0
    assert re.search(r"ir2torch_check_inputs\(x\w*, mask\w*\)", new.code)


def test_wrong_batch_is_refused_naming_the_input_and_both_shapes() -> None:
    model, new = _flatten()
    x, mask = torch.randn(4, 8), torch.ones(4, 8)
    error = _raises(lambda: new(x, mask), "(4, 8)", "(2, 8)", "dim 0 is 4, not 2", key="x")
    assert "dynamic_shapes" in (error.hint or "")
    _raises(lambda: new(torch.randn(2, 12), torch.ones(2, 12)), "(2, 12)", "(2, 8)", key="x")
    _raises(lambda: new(torch.randn(2, 8), torch.ones(2, 8, 1)), "3 dims", key="mask")
    # without the guard the same call runs and is silently wrong: the reshape regroups 4 rows into 2
    unguarded = ir2torch.convert(torch2ir.convert(model, (torch.randn(2, 8), torch.ones(2, 8))), model.state_dict(),
                                 guard_inputs=False)
    assert "check_inputs" not in unguarded.code
    assert model(x, mask).shape == (4,) and unguarded(x, mask).shape == (2,)


def test_wrong_dtype_is_refused() -> None:
    _, new = _flatten()
    _raises(lambda: new(torch.randn(2, 8, dtype=torch.float64), torch.ones(2, 8)),
            "torch.float64", "torch.float32", key="x")
    _raises(lambda: new(torch.randn(2, 8), [[1.0] * 8] * 2), "input is list", key="mask")


@cache
def _options() -> tuple[nn.Module, nn.Module, tuple, dict]:
    torch.manual_seed(0)
    model = _Options().eval()
    args = (torch.randn(2, 8),)
    kwargs = {"flag": True, "pair": (torch.randn(8), torch.randn(1)), "extra": None}
    return model, _rebuilt(model, args, kwargs), args, kwargs


def test_structure_missing_extra_and_nested_arguments_are_refused() -> None:
    model, new, args, kwargs = _options()
    assert max_abs_diff(model(*args, **kwargs), new(*args, **kwargs)) == 0.0
    x = args[0]
    _raises(lambda: new(x, flag=True, extra=None), "missing argument(s) 'pair'", key="pair")
    _raises(lambda: new(x, True, kwargs["pair"], None, torch.ones(1)), "5 positional arguments", "takes 4")
    _raises(lambda: new(x, other=1, **kwargs), "'other' is an unexpected keyword argument", key="other")
    _raises(lambda: new(x, x, **kwargs), "given both by position and by name", key="flag")
    three = (*kwargs["pair"], torch.ones(1))
    _raises(lambda: new(x, flag=True, pair=three, extra=None), "pytree structure", key="pair")
    # a list where a tuple was traced flattens alike: accepted, same result
    as_list = list(kwargs["pair"])
    assert max_abs_diff(model(x, True, as_list), new(x, flag=True, pair=as_list, extra=None)) == 0.0


def test_specialised_constants_and_none_are_checked() -> None:
    model, new, args, kwargs = _options()
    _raises(lambda: new(*args, **{**kwargs, "flag": False}), "constant True", key="flag")
    # a tensor where None was traced would be ignored by the graph
    _raises(lambda: new(*args, **{**kwargs, "extra": torch.ones(8)}), "constant None", key="extra")
    assert model(*args, **{**kwargs, "extra": torch.ones(8)}).shape == (2, 8)


@cache
def _dynamic() -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    model = _Flatten().eval()
    batch = Dim("batch", min=2, max=6)
    shapes = {"x": {0: batch}, "mask": {0: batch}}
    return model, _rebuilt(model, (torch.randn(3, 8), torch.ones(3, 8)), dynamic_shapes=shapes)


@pytest.mark.parametrize("batch", [2, 4, 6])
def test_dynamic_sizes_in_range_run_like_the_original(batch: int) -> None:
    model, new = _dynamic()
    x, mask = torch.randn(batch, 8), torch.rand(batch, 8)
    assert new(x, mask).shape == (batch,)
    assert max_abs_diff(model(x, mask), new(x, mask)) < 1e-6


@pytest.mark.parametrize("batch", [1, 7])
def test_dynamic_sizes_out_of_range_are_refused(batch: int) -> None:
    _, new = _dynamic()
    _raises(lambda: new(torch.randn(batch, 8), torch.ones(batch, 8)),
            f"dim 0 of 'x' is {batch}", "outside the range [2, 6]", key="x")


def test_inputs_sharing_a_symbol_must_agree() -> None:
    _, new = _dynamic()
    _raises(lambda: new(torch.randn(3, 8), torch.ones(4, 8)),
            "dim 0 of 'mask' is 4, but dim 0 of 'x' is 3", "must be equal", key="mask")


def test_derived_dims_are_checked() -> None:
    class Shifted(nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return x + y[1:]

    d = Dim("d", min=2, max=8)
    new = _rebuilt(Shifted(), (torch.randn(4, 3), torch.randn(5, 3)), dynamic_shapes={"x": {0: d}, "y": {0: d + 1}})
    x, y = torch.randn(6, 3), torch.randn(7, 3)
    assert torch.equal(new(x, y), x + y[1:])
    _raises(lambda: new(torch.randn(6, 3), torch.randn(8, 3)), "dim 0 is 8", "+ 1 = 7", key="y")


def test_dim_expressions_are_read_without_eval() -> None:
    assert DimExpr("s0 + 1").evaluate({"s0": 4}) == 5
    assert DimExpr("2*s0 - s1").evaluate({"s0": 4, "s1": 3}) == 5
    assert DimExpr("(s0 + 1)//2").evaluate({"s0": 6}) == 3
    assert DimExpr("s0 + 1").evaluate({}) is None
    for text in ("__import__('os').system('x')", "s0 ** 2", "s0 +", "(s0"):
        assert DimExpr(text).tree is None and DimExpr(text).evaluate({"s0": 1}) is None


def test_real_bert_with_a_wrong_sequence_length() -> None:
    b = built("bert")
    new = ir2torch.convert(torch2ir.convert(b.model, b.args, b.kwargs), b.model.state_dict())
    ids, mask = b.args[0], b.kwargs["attention_mask"]
    with torch.no_grad():
        assert max_abs_diff(b.expected, new(ids, attention_mask=mask)) < 1e-5
        _raises(lambda: new(ids[:, :6], attention_mask=mask[:, :6]), "(2, 6)", "(2, 8)", "dim 1 is 6, not 8",
                key="input_ids")
        _raises(lambda: new(ids, attention_mask=mask[:, :6]), "(2, 6)", key="attention_mask")
        _raises(lambda: new(ids.int(), attention_mask=mask), "torch.int32", "torch.int64", key="input_ids")
        _raises(lambda: new(ids), "missing argument(s) 'attention_mask'", key="attention_mask")


def test_real_bert_dynamic_batch_and_sequence() -> None:
    b = built("bert")
    batch, seq = Dim("batch", min=1, max=4), Dim("seq", min=2, max=16)
    shapes = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
    new = ir2torch.convert(torch2ir.convert(b.model, b.args, b.kwargs, dynamic_shapes=shapes), b.model.state_dict())
    ids = torch.randint(0, 100, (3, 11))
    mask = torch.ones(3, 11, dtype=torch.long)
    with torch.no_grad():
        assert max_abs_diff(b.model(ids, attention_mask=mask), new(ids, attention_mask=mask)) < 1e-5
        _raises(lambda: new(ids, attention_mask=mask[:, :10]), "dim 1 of 'attention_mask' is 10", key="attention_mask")
        long_ids = torch.randint(0, 100, (1, 17))
        _raises(lambda: new(long_ids, attention_mask=torch.ones(1, 17, dtype=torch.long)),
                "outside the range [2, 16]", key="input_ids")


def test_ir_file_keeps_the_guard(tmp_path) -> None:
    model, _ = _flatten()
    path = tmp_path / "m.ir.json"
    torch2ir.convert(model, (torch.randn(2, 8), torch.ones(2, 8))).save(path)
    again = ir2torch.convert(path, model.state_dict())
    _raises(lambda: again(torch.randn(3, 8), torch.ones(3, 8)), "(3, 8)", key="x")


def test_ir_without_input_meta_rebuilds_without_a_guard() -> None:
    model, _ = _flatten()
    ir = torch2ir.convert(model, (torch.randn(2, 8), torch.ones(2, 8)))
    plain = copy.deepcopy(ir.to_dict())
    for node in plain["root"]["nodes"].values():
        if node["type"] == "input":
            node.pop("meta")
    new = ir2torch.convert(IR.from_dict(plain), model.state_dict())
    assert "check_inputs" not in new.code and "input_guard" not in new.meta
    x, mask = torch.randn(2, 8), torch.rand(2, 8)
    assert max_abs_diff(model(x, mask), new(x, mask)) == 0.0


def test_guard_is_plain_data_named_by_a_fixed_name() -> None:
    _, new = _flatten()
    guard = new.meta["input_guard"]
    assert isinstance(guard, InputGuard)
    assert [leaf.path for leaf in guard.leaves] == ["x", "mask"]
    assert guard.leaves[0].shape == (2, 8) and guard.leaves[0].dtype is torch.float32
    targets = [n.target for n in new.graph.nodes if n.op == "call_function"]
    assert targets[0] is guard and guard.__name__ == "check_inputs"


def test_deep_copies_keep_both_checks() -> None:
    model, new, args, kwargs = _options()
    twice = copy.deepcopy(copy.deepcopy(new))
    assert max_abs_diff(model(*args, **kwargs), twice(*args, **kwargs)) == 0.0
    _raises(lambda: twice(torch.randn(3, 8), **kwargs), "(3, 8)", key="x")
    three = (*kwargs["pair"], torch.ones(1))
    _raises(lambda: twice(args[0], flag=True, pair=three, extra=None), "pytree structure", key="pair")


def test_symbolic_tracing_and_reconversion_pass_through_the_guard() -> None:
    model, new = _flatten()
    x, mask = torch.randn(2, 8), torch.rand(2, 8)
    traced = fx.symbolic_trace(new)
    assert max_abs_diff(model(x, mask), traced(x, mask)) == 0.0
    again = ir2torch.convert(torch2ir.convert(new, (x, mask)), new.state_dict())
    assert max_abs_diff(model(x, mask), again(x, mask)) == 0.0
    _raises(lambda: again(torch.randn(3, 8), torch.ones(3, 8)), "(3, 8)", key="x")


class _Positions(nn.Module):
    """Takes a ``torch.Size`` (as transformers' learned position embeddings take ``input_ids.shape``)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(16, 4)

    def forward(self, shape: torch.Size, past: int = 0) -> torch.Tensor:
        return self.emb(torch.arange(past, past + shape[1]))


def test_a_torch_size_argument_binds_as_the_tuple_it_was_traced_as() -> None:
    model = _Positions().eval()
    new = ir2torch.convert(torch2ir.convert(model, (torch.Size([2, 5]),)), model.state_dict())
    assert max_abs_diff(model(torch.Size([2, 5])), new(torch.Size([2, 5]))) == 0.0
    assert max_abs_diff(model(torch.Size([2, 5])), new((2, 5))) == 0.0
    _raises(lambda: new(torch.Size([2, 6])), "constant 5", key="shape[1]")


def test_a_call_check_of_a_module_traced_on_its_own_names_it() -> None:
    """The structure check of a call (``check_call``) names the module traced on its own and how to keep it exact;
    a guard of no such module, or an error naming an implementation already, is left as it is."""
    from ir2torch.guards.check import InputGuard

    named = InputGuard([], {}, ["x"], None, implementation="block.inner", module_class="Inner")
    with pytest.raises(InputMismatchError) as caught:
        named.check_call(nn.Identity(), (), {"y": 1})
    assert caught.value.implementation == "block.inner" and 'opaque=["auto", "Inner"]' in caught.value.hint
    with pytest.raises(InputMismatchError) as caught:
        InputGuard([], {}, ["x"], None).check_call(nn.Identity(), (), {"y": 1})
    assert caught.value.implementation is None and "opaque" not in (caught.value.hint or "")

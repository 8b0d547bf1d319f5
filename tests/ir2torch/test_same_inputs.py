"""One tensor passed for two arguments: the IR marks it, and rebuilt modules refuse two different tensors there.

``torch.export`` gives the graph one of the two inputs to read for both, so run with different tensors the graph
would ignore one of them without a word (``ExportedProgram.module()`` does exactly that).
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common import IR, FlatIR
from common.errors import InputMismatchError, IRFormatError, IRValidationError
from common.serialize import ir_to_document
from ir2torch.guards.same_inputs import SameInputs


class _Mix(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(4, 4)
        self.k = nn.Linear(4, 4)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.q(a) * self.k(b)


class _Model(nn.Module):
    """The root is called with ``(x, x)``; ``mix`` is called with ``(h, h)``, and later with two tensors."""

    def __init__(self) -> None:
        super().__init__()
        self.mix = _Mix()
        self.other = _Mix()

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(x)
        return self.mix(h, h) + self.other(h, y)


def _model() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return _Model().eval(), torch.randn(2, 4)


def _input_meta(ir: IR, key: str) -> dict[str, dict]:
    impl = ir[key]
    return {n: impl.node(n).get("meta") for n in impl.nodes if impl.node(n)["type"] == "input"}


def test_the_ir_marks_inputs_that_were_one_tensor() -> None:
    model, x = _model()
    ir = torch2ir.convert(model, (x, x))
    assert _input_meta(ir, "root")["y"]["same_as"] == "x"
    assert _input_meta(ir, "mix")["b"]["same_as"] == "a"
    assert not any("same_as" in m for m in _input_meta(ir, "other").values())  # (h, y): two tensors
    distinct = torch2ir.convert(model, (x, x.clone()))
    assert not any("same_as" in m for m in _input_meta(distinct, "root").values())


def test_rebuilt_modules_run_one_tensor_and_refuse_two() -> None:
    model, x = _model()
    rebuilt = ir2torch.convert(torch2ir.convert(model, (x, x)), model.state_dict())
    a, b = torch.randn(2, 4), torch.randn(2, 4)
    with torch.no_grad():
        assert torch.equal(rebuilt(a, a), model(a, a))
        assert torch.equal(rebuilt.mix(a, a), model.mix(a, a))
        assert torch.equal(rebuilt.other(a, b), model.other(a, b))  # converted with two tensors: takes two
        with pytest.raises(InputMismatchError, match="'x' and 'y' are different objects") as root:
            rebuilt(a, b)
        with pytest.raises(InputMismatchError, match="'a' and 'b' are different objects") as sub:
            rebuilt.mix(a, b)
    assert root.value.key == "y" and sub.value.implementation == "mix"


def test_the_flat_ir_lists_them_and_its_module_refuses_two_tensors() -> None:
    model, x = _model()
    flat = torch2ir.lower(model, (x, x))
    assert flat.same_inputs == {"y": "x"}
    module = ir2torch.convert(flat, model.state_dict())
    a, b = torch.randn(2, 4), torch.randn(2, 4)
    with torch.no_grad():
        assert torch.equal(module(a, a), model(a, a))
        with pytest.raises(InputMismatchError, match="'x' and 'y'"):
            module(a, b)


def test_files_keep_the_marks(tmp_path) -> None:
    model, x = _model()
    torch2ir.convert(model, (x, x)).save(tmp_path / "m.json")
    torch2ir.lower(model, (x, x)).save(tmp_path / "m.flat.json")
    ir, flat = IR.load(tmp_path / "m.json"), FlatIR.load(tmp_path / "m.flat.json")
    assert _input_meta(ir, "mix")["b"]["same_as"] == "a" and flat.same_inputs == {"y": "x"}
    for loaded in (ir, flat):
        with pytest.raises(InputMismatchError):
            ir2torch.convert(loaded, model.state_dict())(x, x.clone())


def test_converting_the_rebuilt_model_again_gives_the_same_ir() -> None:
    model, x = _model()
    ir = torch2ir.convert(model, (x, x))
    again = torch2ir.convert(ir2torch.convert(ir, model.state_dict()), (x, x))
    assert ir_to_document(again) == ir_to_document(ir)


@pytest.mark.parametrize("strict", [False, True])
def test_tracers_see_one_tensor_and_pass(strict: bool) -> None:
    model, x = _model()
    rebuilt = ir2torch.convert(torch2ir.convert(model, (x, x)), model.state_dict())
    program = torch.export.export(rebuilt, (x, x), strict=strict)
    a = torch.randn(2, 4)
    with torch.no_grad():
        assert torch.equal(program.module()(a, a), model(a, a))


def test_torch_compile_of_a_rebuilt_model_with_marks() -> None:
    model, x = _model()
    rebuilt = ir2torch.convert(torch2ir.convert(model, (x, x)), model.state_dict())
    compiled = torch.compile(rebuilt, fullgraph=True, backend="eager")
    a = torch.randn(2, 4)
    with torch.no_grad():
        assert torch.equal(compiled(a, a), model(a, a))


@pytest.mark.parametrize("value", ["b", "y", "missing", 3, None, ["a"], "mix"])
def test_a_bad_same_as_is_refused_before_anything_runs(value: object) -> None:
    model, x = _model()
    ir = torch2ir.convert(model, (x, x))
    bad = copy.deepcopy(ir)
    meta = bad["mix"].node("a").setdefault("meta", {})
    meta["same_as"] = value  # "b": a later input; "a" would be itself
    with pytest.raises(IRFormatError, match="same_as"):
        ir2torch.convert(bad, model.state_dict())


@pytest.mark.parametrize("entry", [{"x": "y"}, {"y": "y"}, {"y": "nope"}, {"nope": "x"}])
def test_a_bad_same_inputs_entry_is_refused(entry: dict) -> None:
    model, x = _model()
    flat = torch2ir.lower(model, (x, x))
    flat.same_inputs = entry
    with pytest.raises(IRValidationError, match="same_inputs"):
        ir2torch.convert(flat, model.state_dict())
    with pytest.raises(IRFormatError, match="same_inputs"):
        FlatIR.from_dict({**flat.to_dict(), "same_inputs": {"y": 1}})


def test_the_check_compares_tensors_by_identity_and_ints_by_value() -> None:
    check = SameInputs(((1, 0, "m", "n"),), "block")
    x = torch.randn(2)
    check(x, x)
    check(int("300"), int("300"))  # equal ints need not be one object
    for a, b in ((x, x.clone()), (x, x.view(2)), (3, 4), (3, 3.0)):
        with pytest.raises(InputMismatchError, match="'n' and 'm'"):
            check(a, b)

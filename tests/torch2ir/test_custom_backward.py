"""A forward calling a custom ``torch.autograd.Function`` converts with a warning naming it: the IR keeps the
Function's forward ops, not its backward, so the rebuild's outputs are exact and its gradients through the
Function are not the original's (brevitas' straight-through estimators; found on its bnn_pynq TFC)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from torch2ir.frontend.custom_backward import CustomBackwardWarning


class _RoundSte(torch.autograd.Function):
    """Round in the forward, pass the gradient through in the backward (a straight-through estimator)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return torch.round(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad


class _Quantized(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _RoundSte.apply(self.linear(x) * 4) / 4


def _ste_model() -> nn.Module:
    torch.manual_seed(0)
    return _Quantized()


def test_a_custom_function_is_named_and_the_gradients_it_would_change_are_why() -> None:
    torch.manual_seed(0)
    model, x = _Quantized(), torch.randn(2, 4)
    with pytest.warns(CustomBackwardWarning, match=r"calls custom autograd.Function\(s\) [\w.]*_RoundSte: the IR "
                                                   r"keeps the ops of their forward, not their own backward"):
        ir = torch2ir.convert(model, (x,))
    rebuilt = ir2torch.convert(ir, model.state_dict())
    assert torch.equal(rebuilt(x), model(x))  # the forward is exact
    model(x).sum().backward()
    rebuilt(x).sum().backward()
    assert model.linear.weight.grad.abs().sum() > 0  # the estimator passes the gradient through
    assert rebuilt.linear.weight.grad.abs().sum() == 0  # round's own gradient: what the warning is about


def test_no_warning_without_custom_functions_and_forwards_are_restored() -> None:
    original = _RoundSte.__dict__["forward"]
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    with warnings.catch_warnings():
        warnings.simplefilter("error", CustomBackwardWarning)
        torch2ir.convert(model, (torch.randn(2, 4),))
    assert _RoundSte.__dict__["forward"] is original


def test_a_function_applied_through_an_early_bound_alias_is_named() -> None:
    """brevitas binds ``round_ste_impl = RoundSteFn.apply`` at import: the forward is what is watched."""
    alias = _RoundSte.apply

    class Aliased(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return alias(x * 3)

    with pytest.warns(CustomBackwardWarning, match="_RoundSte"):
        torch2ir.convert(Aliased(), (torch.randn(3),))


def test_forwards_are_restored_when_the_export_fails() -> None:
    class Fails(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = _RoundSte.apply(x)
            return y if x.sum() > 0 else -y  # data-dependent control flow: export fails

    original = _RoundSte.__dict__["forward"]
    with pytest.raises(Exception, match="torch.export could not trace"):
        torch2ir.convert(Fails(), (torch.randn(3),))
    assert _RoundSte.__dict__["forward"] is original
    assert torch.equal(_RoundSte.apply(torch.tensor([0.4, 1.6])), torch.tensor([0.0, 2.0]))


def test_a_custom_operator_with_its_autograd_formula_is_not_reported() -> None:
    """``torch.library`` runs a custom operator's registered backward through a generated Function; the operator
    stays in the graph, so the rebuild keeps that backward (transformers' MoE ``grouped_mm`` fallback)."""
    lib = torch.library.Library("t2ir_cb_test", "FRAGMENT")  # the operator lives as long as this object
    torch.library.define("t2ir_cb_test::ste", "(Tensor x) -> Tensor", lib=lib)

    @torch.library.impl("t2ir_cb_test::ste", "CompositeExplicitAutograd", lib=lib)
    def _ste(x: torch.Tensor) -> torch.Tensor:
        return torch.round(x)

    @torch.library.register_fake("t2ir_cb_test::ste", lib=lib)
    def _fake(x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)

    torch.library.register_autograd("t2ir_cb_test::ste", lambda ctx, grad: grad, lib=lib)

    class Uses(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.ops.t2ir_cb_test.ste(x * 2)

    x = torch.randn(3, requires_grad=True)
    converter = torch2ir.get_default_converter()
    converter.allowlist.allow("t2ir_cb_test::*")
    with warnings.catch_warnings():
        warnings.simplefilter("error", CustomBackwardWarning)
        ir = converter.convert(Uses(), (x.detach(),))
    rebuilder = ir2torch.get_default_converter()
    rebuilder.allowlist.allow("t2ir_cb_test::*")
    rebuilder.convert(ir, {})(x).sum().backward()
    assert torch.equal(x.grad, torch.full((3,), 2.0))  # the registered backward ran in the rebuild


def test_the_note_travels_with_the_ir_file_and_back_through_the_loop(tmp_path):
    """The IR records the Functions (root ``meta["custom_backward"]``); a rebuild from the saved file warns again,
    and the rebuilt model, which no longer calls them, converts back with the original's note."""
    from common.ir import IR
    from common.notes import CustomBackwardWarning as Recorded

    model, x = _ste_model(), torch.randn(2, 4)
    with pytest.warns(CustomBackwardWarning):
        ir = torch2ir.convert(model, (x,))
    assert Recorded is CustomBackwardWarning
    names = ir.root.meta["custom_backward"]
    assert names == [f"{_RoundSte.__module__}.{_RoundSte.__qualname__}"]
    ir.save(tmp_path / "m.ir.json")
    with pytest.warns(CustomBackwardWarning, match=r"_RoundSte"):
        rebuilt = ir2torch.convert(IR.load(tmp_path / "m.ir.json"), model.state_dict())
    torch.testing.assert_close(rebuilt(x), model(x), rtol=0, atol=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CustomBackwardWarning)  # the rebuild calls no Function: no new warning
        again = torch2ir.convert(rebuilt, (x,))
    assert again == ir


@pytest.mark.parametrize("hostile", ["not a list", [1, 2], ["x" * 400], ["a\nb"], ["n"] * 70, [""]])
def test_a_hostile_note_is_refused_at_load(tmp_path, hostile):
    import json

    from common.errors import IRFormatError
    from common.ir import IR

    model, x = _ste_model(), torch.randn(2, 4)
    with pytest.warns(CustomBackwardWarning):
        torch2ir.convert(model, (x,)).save(tmp_path / "m.ir.json")
    doc = json.loads((tmp_path / "m.ir.json").read_text())
    doc["implementations"]["root"]["meta"]["custom_backward"] = hostile
    (tmp_path / "m.ir.json").write_text(json.dumps(doc))
    with pytest.raises(IRFormatError, match="custom_backward"):
        IR.load(tmp_path / "m.ir.json")

"""One probe on symbolic sizes covers a family of input signatures (:mod:`ir2torch.run_safety.symbolic_probe`): a
decoder's ``generate()`` is probed a few times instead of once per token, and a covered call is still refused
when it would exceed the budget, leave the input guard's range, or differ in anything but the probed sizes."""

from __future__ import annotations

from typing import Any

import pytest
import sympy
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.export import Dim
from torch.utils._sympy.functions import FloorDiv, Mod

import ir2torch
import torch2ir
from common.errors import IRError, ResourceBudgetError
from ir2torch.run_safety import forward_budget, symbolic_probe
from ir2torch.run_safety.forward_budget import BUDGET_ATTR
from ir2torch.run_safety.size_exprs import decide, evaluate

#: The real threshold (the tests below lower it to 2, to see covers after a few calls).
_AFTER = symbolic_probe.AFTER


@pytest.fixture(autouse=True)
def _early(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(symbolic_probe, "AFTER", 2)


class _Outer(nn.Module):
    """Allocates ``n * n`` floats for an input of ``n``: the memory grows faster than the input."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x.unsqueeze(-1) * x.unsqueeze(-2) * self.scale).sum(-1)


def _probes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes each concrete probe ran on."""
    seen: list[int] = []
    original = forward_budget.ForwardBudget._probe

    def counting(self: Any, obj: Any, call: Any, args: tuple, kwargs: dict, *rest: Any) -> bool:
        seen.append(args[0].shape[-1])
        return original(self, obj, call, args, kwargs, *rest)

    monkeypatch.setattr(forward_budget.ForwardBudget, "_probe", counting)
    return seen


def _rebuilt(max_bytes: int) -> tuple[nn.Module, nn.Module]:
    model = _Outer().eval()
    ir = torch2ir.convert(model, (torch.randn(1, 8),), dynamic_shapes={"x": {1: Dim("n", min=2, max=100_000)}})
    return model, ir2torch.convert(ir, model.state_dict(), max_bytes=max_bytes)


def test_two_probes_cover_every_size_the_guards_allow(monkeypatch: pytest.MonkeyPatch) -> None:
    probes = _probes(monkeypatch)
    model, rebuilt = _rebuilt(max_bytes=4_000_000)
    for n in (10, 11, *range(12, 60, 7), 400, 600):
        x = torch.randn(1, n)
        torch.testing.assert_close(rebuilt(x), model(x))
    assert probes == [10, 11]  # the third size on was covered by the symbolic probe made after the second


def test_the_first_symbolic_probe_waits_for_as_many_concrete_probes_as_it_costs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With the real threshold, a family called fewer times than it is worth is probed as before, one signature at a
    time; called more often, it is covered from the threshold on."""
    monkeypatch.setattr(symbolic_probe, "AFTER", _AFTER)
    probes = _probes(monkeypatch)
    model, rebuilt = _rebuilt(max_bytes=4_000_000)
    sizes = list(range(10, 10 + _AFTER + 8))
    for n in sizes:
        x = torch.randn(1, n)
        torch.testing.assert_close(rebuilt(x), model(x))
    assert probes == sizes[:_AFTER]


def test_a_covered_family_still_refuses_a_size_over_the_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe's peak is an expression of the sizes, tested against the budget at each new signature: n = 3000
    needs 36 MB, over the 4 MB budget, and is refused before anything runs."""
    probes = _probes(monkeypatch)
    _, rebuilt = _rebuilt(max_bytes=4_000_000)
    for n in (10, 11, 12):
        rebuilt(torch.randn(1, n))
    budget = rebuilt.__dict__[BUDGET_ATTR]
    assert budget.symbolic.covers, "the symbolic probe made no cover"
    with pytest.raises(ResourceBudgetError, match="nothing was allocated"):
        rebuilt(torch.randn(1, 3000))
    assert probes == [10, 11, 3000]  # not covered (its peak is over the budget): probed, and refused by the probe


def test_a_size_outside_the_input_guards_range_is_not_covered() -> None:
    model = _Outer().eval()
    ir = torch2ir.convert(model, (torch.randn(1, 8),), dynamic_shapes={"x": {1: Dim("n", min=2, max=64)}})
    rebuilt = ir2torch.convert(ir, model.state_dict(), max_bytes=4_000_000)
    for n in (10, 11, 12):
        rebuilt(torch.randn(1, n))
    with pytest.raises(IRError, match="65"):
        rebuilt(torch.randn(1, 65))


def test_other_strides_or_dtypes_are_probed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    probes = _probes(monkeypatch)
    model, rebuilt = _rebuilt(max_bytes=4_000_000)
    for n in (10, 11, 12):
        rebuilt(torch.randn(1, n))
    wide = torch.randn(13, 2).t()[:1]  # shape (1, 13), stride (1, 2): not the probed strides
    torch.testing.assert_close(rebuilt(wide), model(wide))
    assert probes == [10, 11, 13]


class _Conv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.conv(x).relu()).flatten(1)


def _conv_rebuilt(max_flops: Any) -> tuple[nn.Module, nn.Module]:
    model = _Conv().eval()
    shapes = {"x": {0: Dim("b", min=1, max=64), 2: 8 * Dim("h", min=1, max=64), 3: 8 * Dim("w", min=1, max=64)}}
    ir = torch2ir.convert(model, (torch.randn(2, 3, 16, 16),), dynamic_shapes=shapes)
    return model, ir2torch.convert(ir, model.state_dict(), max_bytes=64_000_000, max_flops=max_flops)


def test_batch_one_and_larger_batches_get_a_cover_each(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sizes 0 and 1 are decided by the kernels, not symbols: calls with batch 1 and with more are two families.
    The FLOPs and workspace of a convolution stay expressions of the sizes (an ``int()`` of them fixed every
    symbol to the probed size, and nothing was covered)."""
    seen: list[tuple[int, ...]] = []
    original = forward_budget.ForwardBudget._probe
    monkeypatch.setattr(forward_budget.ForwardBudget, "_probe",
                        lambda self, obj, call, args, *rest: seen.append(tuple(args[0].shape)) or
                        original(self, obj, call, args, *rest))
    model, rebuilt = _conv_rebuilt("auto")
    calls = [(b, h, w) for h, w in ((16, 16), (24, 16), (32, 40), (64, 64), (16, 80)) for b in (1, 2, 3)]
    for b, h, w in calls:
        x = torch.randn(b, 3, h, w)
        torch.testing.assert_close(rebuilt(x), model(x))
    assert len(seen) <= 6 < len(calls), seen


def test_a_covered_family_still_refuses_a_call_over_the_compute_budget() -> None:
    model, rebuilt = _conv_rebuilt(3_000_000)
    for h in (16, 24, 32):
        x = torch.randn(2, 3, h, h)
        torch.testing.assert_close(rebuilt(x), model(x))
    assert rebuilt.__dict__[BUDGET_ATTR].symbolic.covers, "the symbolic probe made no cover"
    with pytest.raises(ResourceBudgetError, match="compute budget"):
        rebuilt(torch.randn(8, 3, 256, 256))  # 8 * 128 * 128 * 8 * 27 * 2 FLOPs, far over 3 MFLOP


def test_generate_on_a_rebuilt_gpt2_probes_a_few_steps_not_each(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first ``generate()`` of a process made one probe per token (each step's cache is one longer)."""
    transformers = pytest.importorskip("transformers")
    from ir2torch.generation import for_generation
    from torch2ir.generation import convert_for_generation

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=128,
                                     pad_token_id=0, bos_token_id=1, eos_token_id=2)
    model = transformers.GPT2LMHeadModel(config).eval()
    rebuilt = for_generation(ir2torch.convert(convert_for_generation(model), model.state_dict()), model.config,
                             model.generation_config)
    seen: list[int] = []
    original = forward_budget.ForwardBudget._probe
    monkeypatch.setattr(forward_budget.ForwardBudget, "_probe",
                        lambda self, *a, **k: seen.append(1) or original(self, *a, **k))
    ids = torch.randint(3, 100, (2, 7))
    mask = torch.ones_like(ids)
    mask[0, :2] = 0
    options = {"max_new_tokens": 20, "min_new_tokens": 20, "do_sample": False}
    assert torch.equal(rebuilt.generate(ids, attention_mask=mask, **options),
                       model.generate(ids, attention_mask=mask, **options))
    assert 0 < len(seen) <= 4, len(seen)


_S, _T = sympy.symbols("s0 s1", integer=True, positive=True)
_EXPRESSIONS = [
    2 * _S + 528 <= 1536, sympy.Eq(_S, _T), sympy.Max(3 * _S + 7, _S * _T, 40) + FloorDiv(_S * _T, 3),
    Mod(_S * _T + 5, 7), sympy.Min(_S, 2 * _T) * 16 < _S ** 2, sympy.Ne(FloorDiv(_S, 2), _T),
    sympy.And(_S >= 4, _T <= 500),
]


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 10_000), st.integers(2, 10_000))
def test_the_integer_evaluation_agrees_with_sympy(s: int, t: int) -> None:
    values = {_S: s, _T: t}
    for expr in _EXPRESSIONS:
        assert evaluate(expr, values) == decide(expr, values), expr


def test_an_expression_with_a_symbol_without_a_value_is_not_decided() -> None:
    with pytest.raises(KeyError):
        evaluate(_S + _T > 3, {_S: 4})

"""Constant folding (ir2torch.codegen.constant_fold): constants that escape the folded part are handed out as one fresh
copy per call (to the output, a submodule, an in-place op), or recomputed when a copy would not be exact; lifted
constants are folded from their current values."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ir2torch.codegen.constant_fold import plan_fold
from ir2torch.codegen.fold_cache import FOLD_ATTR, VALUES_ATTR
from tests.ir2torch.test_constant_fold import _aten_ops, _Bump, _ConstantOutput, _folded_ops, _IntoSubmodule, _rebuild


def test_a_constant_reaching_the_output_is_a_fresh_tensor_on_every_call() -> None:
    x, model = torch.randn(4), _ConstantOutput()
    _, folded = _rebuild(model, x)
    assert "aten.mul.Tensor" in _folded_ops(folded)
    first, second = folded(x)[1], folded(x)[1]
    assert first.untyped_storage().data_ptr() != second.untyped_storage().data_ptr()
    first.add_(100)  # the caller owns what it got back
    assert torch.equal(second, model(x)[1]) and torch.equal(folded(x)[1], model(x)[1])
    assert second.stride() == model(x)[1].stride() and second._version == 0


def test_a_constant_a_submodule_writes_in_place_is_copied_for_each_call() -> None:
    x = torch.randn(4)
    model = _IntoSubmodule()
    _, folded = _rebuild(model, x)
    assert "aten.mul.Tensor" in _folded_ops(folded)
    for _ in range(3):  # the submodule bumps its argument in place: each call gets its own copy
        assert torch.equal(folded(x), model(x))


class _Echo(nn.Module):
    """Returns a view of its argument: what it was given reaches its caller."""

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return t.view(-1)


class _ThroughChild(nn.Module):
    """A constant a child returns unchanged: it reaches the caller through the child."""

    def __init__(self) -> None:
        super().__init__()
        self.echo = _Echo()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c = (torch.arange(4.0) + 1) * 2
        return x + 1, self.echo(c)


def test_a_constant_a_child_returns_is_the_callers_own_on_every_call() -> None:
    x, model = torch.randn(4), _ThroughChild()
    _, folded = _rebuild(model, x)
    assert "aten.mul.Tensor" in _folded_ops(folded)
    first = folded(x)[1]
    first.mul_(0)
    assert torch.equal(folded(x)[1], model(x)[1])


class _BaseAndView(nn.Module):
    """A constant and a view of it both read outside the constant part: copies would not alias each other."""

    def __init__(self) -> None:
        super().__init__()
        self.bump = _Bump()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = (torch.arange(4.0) + 1) * 2
        return x + self.bump(c[:2]).sum() + c


def test_a_constant_read_outside_through_a_view_too_is_recomputed() -> None:
    x, model = torch.randn(4), _BaseAndView()
    _, folded = _rebuild(model, x)
    assert "aten.mul.Tensor" not in _folded_ops(folded)
    for _ in range(3):  # ``bump`` writes ``c`` through the view; the parent then reads the written ``c``
        assert torch.equal(folded(x), model(x))


class _First(nn.Module):
    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return t[0] * 1


class _ChannelsLast(nn.Module):
    """A constant in channels-last layout, passed to a child: a copy keeps its strides only when dense."""

    def __init__(self) -> None:
        super().__init__()
        self.echo = _Echo()
        self.first = _First()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = (torch.arange(24.0).view(1, 2, 3, 4) * 2).contiguous(memory_format=torch.channels_last) + 1
        return self.echo(c.sum((0, 1)))[:4] + self.first(c).sum() + x


def test_a_constant_that_cannot_be_copied_exactly_turns_the_fold_off() -> None:
    x, model = torch.randn(4), _ChannelsLast()
    _, folded = _rebuild(model, x)
    plan = plan_fold(folded.graph)
    assert plan is not None and plan.copied  # planned as a copy; the computed value is not contiguous
    for _ in range(2):
        assert torch.equal(folded(x), model(x))
    assert folded.__dict__[FOLD_ATTR].off and VALUES_ATTR not in folded.__dict__
    assert _aten_ops(folded, x)["aten::arange"] >= 1  # the plain forward runs


class _Filled(nn.Module):
    """Index assignments of Python numbers (as BEiT's relative-position index): export lifts the numbers as
    tensor constants that ``lift_fresh_copy`` reads."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        idx = torch.zeros(3, 3, dtype=torch.long)
        idx[0, :] = 5
        idx[:, 0] = 6
        return x + idx.sum(0)


def _lifted(rebuilt: nn.Module) -> list[str]:
    return [n.target for n in rebuilt.graph.nodes if n.op == "get_attr" and "lifted" in str(n.target)]


def test_lifted_constants_are_folded_and_their_current_values_are_used() -> None:
    x, model = torch.randn(3), _Filled()
    _, folded = _rebuild(model, x)
    _, plain = _rebuild(model, x, fold=False)
    names = _lifted(folded)
    assert names and {"aten.lift_fresh_copy.default", "aten.fill_.Tensor"} <= _folded_ops(folded)
    assert torch.equal(folded(x), model(x)) and _aten_ops(folded, x)["aten::lift_fresh_copy"] == 0
    for change in (lambda m: getattr(m, names[0]).data.fill_(9),  # in place, past the version counter
                   lambda m: setattr(m, names[-1], torch.tensor(-4)),  # another tensor
                   lambda m: setattr(m, names[0], torch.tensor(2.5))):  # another dtype
        change(folded)
        change(plain)
        assert torch.equal(folded(x), plain(x))  # the changed constant, as the plain forward reads it
    setattr(folded, names[0], torch.arange(100))  # too large to compare on every call: the plain forward runs
    setattr(plain, names[0], torch.arange(100))
    with pytest.raises(Exception) as folded_error:
        folded(x)
    with pytest.raises(Exception) as plain_error:
        plain(x)
    assert type(folded_error.value) is type(plain_error.value)

"""A model whose train mode refuses the example inputs (``BatchNorm`` on a batch of one): when the eager pass fails
alike on CPU copies and on meta, the conversion says why without a train-mode export, and says what that export
would have said."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import ir2torch
import torch2ir


class _Head(nn.Module):
    """Dropout, then BatchNorm on pooled features: in train mode a batch of one is refused by torch itself."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.norm = nn.BatchNorm1d(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(F.dropout(self.lin(x), 0.1, self.training))


class _DropPathHead(_Head):
    """No dropout op; reads ``training`` for a DropPath-like random mask (the randomness check only)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        if self.training:
            h = h * (torch.rand(x.shape[0], 1, device=x.device) > 0.5)
        return self.norm(h)


def _train_error(model: nn.Module, x: torch.Tensor) -> str:
    """What torch itself raises running ``model`` in train mode on ``x`` (then back to eval mode)."""
    model.train()
    try:
        with pytest.raises(ValueError) as info:
            model(x)
    finally:
        model.eval()
    return f"ValueError: {info.value}"


@pytest.fixture
def exports(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """One entry per ``torch.export.export`` call during the test (True when it is a train-mode export)."""
    calls: list[bool] = []
    original = torch.export.export

    def counting(model: nn.Module, *args: object, **kwargs: object) -> object:
        calls.append(model.training)
        return original(model, *args, **kwargs)

    monkeypatch.setattr(torch.export, "export", counting)
    return calls


def _cpu(monkeypatch: pytest.MonkeyPatch, device: str) -> None:
    monkeypatch.setattr("torch2ir.train.passes.pass_device", lambda *a, **k: device)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_a_pass_failing_alike_on_cpu_and_meta_is_reported_without_a_train_export(device, exports, monkeypatch) -> None:
    _cpu(monkeypatch, device)  # on meta first: a CPU pass tells whether the failure is the model's own
    torch.manual_seed(0)
    model, x = _Head().eval(), torch.randn(1, 4)
    expected = _train_error(model, x)
    ir = torch2ir.convert(model, (x,))
    assert ir.root.meta["train_trace"] == f"failed: {expected}"
    assert exports == [False]  # the eval export only
    rebuilt = ir2torch.convert(ir, model.state_dict()).eval()
    torch.testing.assert_close(rebuilt(x), model(x), rtol=0, atol=0)


def test_the_train_export_it_skips_would_have_said_the_same(exports, monkeypatch) -> None:
    _cpu(monkeypatch, "meta")  # one failed attempt only: nothing says the export would fail, so it is tried
    monkeypatch.setattr("torch2ir.train.passes.cpu_possible", lambda *a, **k: False)
    torch.manual_seed(0)
    model, x = _Head().eval(), torch.randn(1, 4)
    ir = torch2ir.convert(model, (x,))
    assert exports == [False, True]
    assert ir.root.meta["train_trace"] == f"failed: {_train_error(model, x)}"


def test_a_failure_on_meta_alone_still_tries_the_train_export(exports, monkeypatch) -> None:
    _cpu(monkeypatch, "cpu")

    def meta_fails(*args: object, errors: list | None = None, **kwargs: object) -> object:
        if errors is not None:
            errors.extend([RuntimeError("cpu kernel"), RuntimeError("no meta kernel")])
        return None

    monkeypatch.setattr("torch2ir.train.passes.record_train_ops", meta_fails)
    torch.manual_seed(0)
    model, x = _Head().eval(), torch.randn(2, 4)
    ir = torch2ir.convert(model, (x,))
    assert exports == [False, True]  # the failures differed: the export decides, and succeeds
    assert ir.root.meta["train_trace"] == "applied"


def test_the_randomness_check_names_the_failure(monkeypatch) -> None:
    _cpu(monkeypatch, "cpu")
    torch.manual_seed(0)
    model, x = _DropPathHead().eval(), torch.randn(1, 4)
    ir = torch2ir.convert(model, (x,))
    assert ir.root.meta["train_trace"] == f"not checked: the train-mode pass failed: {_train_error(model, x)}"


class _CountingHead(_Head):
    """Also counts its train-mode calls in a buffer: the train-update check needs a train-mode pass too."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("steps", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.steps += 1
        return super().forward(x)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_the_train_update_check_names_the_failure_without_another_pass(device, monkeypatch) -> None:
    _cpu(monkeypatch, device)
    passes = []
    real = torch2ir.train.updates.copied
    monkeypatch.setattr("torch2ir.train.updates.copied", lambda *a, **k: passes.append(1) or real(*a, **k))
    torch.manual_seed(0)
    model, x = _CountingHead().eval(), torch.randn(1, 4)
    ir = torch2ir.convert(model, (x,))
    expected = _train_error(model, x)
    assert ir.root.meta["train_trace"] == f"failed: {expected}"
    assert ir.root.meta["train_buffers"] == f"not checked: the train-mode pass failed: {expected}"
    assert passes == []  # the update check did not run the failing forward a third time

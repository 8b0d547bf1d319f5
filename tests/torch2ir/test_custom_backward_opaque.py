"""Modules calling custom ``torch.autograd.Function``\\ s kept as opaque leaves (``opaque="auto"``,
:mod:`torch2ir.opaque.custom_calls`): the rebuild is their real class, running the Function's own backward, so
train-mode outputs, every gradient and SGD steps are the original's; without it, the warning names the classes and
the ``opaque=`` to pass."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common.notes import CUSTOM_BACKWARD_KEY
from common.opaque import OPAQUE_TYPE, named_classes
from tests.torch2ir.test_custom_backward import _RoundSte
from torch2ir.frontend.custom_backward import CustomBackwardWarning


class FakeQuant(nn.Module):
    """Fake-quantizes with a learned scale through the estimator."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(0.25))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _RoundSte.apply(x / self.scale) * self.scale


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin1 = nn.Linear(4, 6)
        self.quant = FakeQuant()
        self.lin2 = nn.Linear(6, 3)
        self.gain = nn.Parameter(torch.tensor(1.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin2(torch.relu(self.quant(self.lin1(x)))) * self.gain


class RootCalls(Net):
    """Its own forward calls the estimator: the root is the module to keep."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _RoundSte.apply(self.lin2(self.lin1(x)) * 4) * self.gain


X = torch.randn(5, 4, generator=torch.Generator().manual_seed(0))
QUANT = f"{__name__}.FakeQuant"


def _model(cls: type[nn.Module] = Net) -> nn.Module:
    torch.manual_seed(0)
    return cls().eval()


def _quiet_auto(model: nn.Module, opaque: object = "auto") -> torch2ir.IR:
    with warnings.catch_warnings():
        warnings.simplefilter("error", CustomBackwardWarning)  # nothing is left to warn about
        return torch2ir.convert(model, (X,), opaque=opaque)


def assert_trains_alike(original: nn.Module, rebuilt: nn.Module, steps: int = 3) -> None:
    """Train mode: each step's outputs equal, every parameter's gradient equal, the parameters equal after each SGD
    step (plain tensors compared with ``torch.equal``)."""
    original.train()
    rebuilt.train()
    names = [n for n, _ in original.named_parameters()]
    assert names == [n for n, _ in rebuilt.named_parameters()]
    for step in range(steps):
        x = X * (1 + step)
        out, got = original(x), rebuilt(x)
        assert torch.equal(out, got)
        out.square().sum().backward()
        got.square().sum().backward()
        graded = 0
        for (name, p), q in zip(original.named_parameters(), rebuilt.parameters(), strict=True):
            assert (p.grad is None) == (q.grad is None), name  # a parameter the forward does not use: none
            assert p.grad is None or torch.equal(p.grad, q.grad), name
            graded += p.grad is not None and bool(p.grad.abs().sum() > 0)
        assert graded >= 3
        with torch.no_grad():
            for module in (original, rebuilt):
                for p in module.parameters():
                    if p.grad is not None:
                        p -= 0.05 * p.grad
                        p.grad = None
        assert all(torch.equal(a, b) for a, b in zip(original.parameters(), rebuilt.parameters(), strict=True))


def test_the_warning_names_the_module_classes_and_what_to_pass() -> None:
    with pytest.warns(CustomBackwardWarning) as caught:
        ir = torch2ir.convert(_model(), (X,))
    text = str(caught[0].message)
    assert "_RoundSte" in text and f"opaque=['{QUANT}']" in text and 'opaque="auto"' in text and "allow=" in text
    assert ir["quant"].type == "module" and ir.root.meta[CUSTOM_BACKWARD_KEY]


def test_the_traced_rebuild_does_not_train_alike() -> None:
    """What the opaque leaf is for: traced, the estimator's gradient is round's (zero)."""
    model = _model()
    with pytest.warns(CustomBackwardWarning):
        ir = torch2ir.convert(model, (X,))
    with pytest.warns(CustomBackwardWarning):
        rebuilt = ir2torch.convert(ir, model.state_dict())
    model(X).sum().backward()
    rebuilt(X).sum().backward()
    assert model.lin1.weight.grad.abs().sum() > 0 and rebuilt.lin1.weight.grad.abs().sum() == 0


def test_auto_keeps_the_calling_module_opaque_and_the_rebuild_trains_alike() -> None:
    model = _model()
    ir = _quiet_auto(model)
    assert [(p, c) for p, c, _ in ir.capture.opaque] == [("quant", QUANT)]
    assert "_RoundSte" in ir.capture.opaque[0][2] and "backward" in ir.capture.opaque[0][2]
    assert ir["quant"].type == OPAQUE_TYPE and ir["lin1"].type == "linear" and ir.root.node_count
    assert CUSTOM_BACKWARD_KEY not in ir.root.meta
    assert named_classes(ir.values()) == [QUANT]
    with warnings.catch_warnings():
        warnings.simplefilter("error", CustomBackwardWarning)
        rebuilt = ir2torch.convert(ir, model.state_dict(), allow=[QUANT])
    assert type(rebuilt.quant) is FakeQuant
    assert_trains_alike(_model(), rebuilt)


def test_explicit_classes_do_the_same_and_convert_back_to_the_same_ir() -> None:
    model = _model()
    ir = _quiet_auto(model, [FakeQuant])
    assert [(c, why) for _, c, why in ir.capture.opaque] == [(QUANT, "named in opaque=")]
    assert ir == _quiet_auto(model)  # the same leaves as "auto" finds
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=[QUANT])
    assert_trains_alike(_model(), rebuilt)
    auto = _quiet_auto(_model())
    again = ir2torch.convert(auto, _model().state_dict(), allow=[QUANT])
    assert _quiet_auto(again) == auto  # a fixpoint


def test_a_root_calling_the_function_is_kept_opaque() -> None:
    model = _model(RootCalls)
    ir = _quiet_auto(model)
    assert ir.capture.opaque[0][:2] == ("", f"{__name__}.RootCalls")
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=named_classes(ir.values()))
    assert type(rebuilt) is RootCalls
    assert_trains_alike(_model(RootCalls), rebuilt)


def test_auto_and_classes_together() -> None:
    model = _model()
    ir = _quiet_auto(model, ["auto", nn.ReLU])  # a class no module has: makes nothing opaque
    assert [c for _, c, _ in ir.capture.opaque] == [QUANT]
    with pytest.raises(TypeError, match="opaque"):
        torch2ir.convert(model, (X,), opaque=["auto", 3])


def test_rebuilding_still_needs_the_class_allowed() -> None:
    from common.errors import UnsafeTargetError

    model = _model()
    ir = _quiet_auto(model)
    with pytest.raises(UnsafeTargetError, match="FakeQuant"):
        ir2torch.convert(ir, model.state_dict())

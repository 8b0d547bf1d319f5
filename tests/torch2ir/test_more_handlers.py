"""The classes handled for issue #15 point 4 round-trip through a real model, exactly.

Each module of ``more_cases.CASES`` (and weighted losses, an LSTM cell given its state) sits in a tiny
model; ``assert_roundtrip`` converts, saves, loads, rebuilds with the state dict and compares outputs.
Here they must be exactly equal, the module must come back as its own class, and both registries must
agree on its IR type.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common.errors import ConversionError, IRFormatError
from common.ir import Implementation
from common.testing import assert_roundtrip
from tests.torch2ir.more_cases import CASES, NLL2D_DEPRECATED, Inputs


class Holder(nn.Module):
    """Calls its one child on the model's inputs."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.inner = module

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return self.inner(*args)


class CellWithState(nn.Module):
    """An LSTM cell called with its ``(h, c)`` state, as a decoder loop does."""

    def __init__(self) -> None:
        super().__init__()
        self.cell = nn.LSTMCell(4, 5)

    def forward(self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.cell(x, (h, c))


class Scored(nn.Module):
    """A linear scorer followed by a loss (the loss's weight buffers are state of the model)."""

    def __init__(self, loss: nn.Module, classes: int = 3) -> None:
        super().__init__()
        self.score = nn.Linear(4, classes)
        self.loss = loss

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self.loss(self.score(x), target)


def _check(model: nn.Module, args: tuple, handled: type[nn.Module]) -> nn.Module:
    """Round-trip ``model``; exact outputs; every ``handled`` module rebuilt as that class; registries agree."""
    t2i, i2t = torch2ir.get_default_converter(), ir2torch.get_default_converter()
    ir_type = t2i.type_of(handled)
    assert ir_type == handled.__name__.lower() and ir_type in set(i2t.builders.keys())
    ir, rebuilt, report = assert_roundtrip(model.eval(), args)
    assert report.max_abs_diff == 0, report
    kinds = {impl.type for impl in ir.values()}
    assert ir_type in kinds
    originals = [type(m) for m in model.modules() if type(m) is handled]
    assert originals and [type(m) for m in rebuilt.modules() if type(m) is handled] == originals
    return rebuilt


#: Handled, but torch.export cannot trace a model calling them (the attributes round-trip in test_handlers.py).
NOT_EXPORTABLE = {
    nn.CTCLoss: "DynamicOutputShapeException: aten._ctc_loss",  # data-dependent output shape
    nn.GaussianNLLLoss: "GuardOnDataDependentSymNode",  # its forward checks ``torch.any(var < 0)``
}


@pytest.mark.parametrize(
    ("module", "inputs"),
    [
        pytest.param(m, i, marks=(*marks, NLL2D_DEPRECATED), id=type(m).__name__)
        for m, i, marks in CASES
        if type(m) not in NOT_EXPORTABLE
    ],
)
def test_module_round_trips_exactly(module: nn.Module, inputs: Inputs) -> None:
    torch.manual_seed(0)
    _check(Holder(module), tuple(inputs()), type(module))


@pytest.mark.parametrize(
    ("module", "inputs"), [(m, i) for m, i, _ in CASES if type(m) in NOT_EXPORTABLE], ids=lambda v: type(v).__name__
)
def test_export_limits_are_reported_as_conversion_errors(module: nn.Module, inputs: Inputs) -> None:
    """When torch.export learns to trace these, this fails: move them to the round-trip test above."""
    with pytest.raises(ConversionError, match=NOT_EXPORTABLE[type(module)]):
        torch2ir.convert(Holder(module).eval(), tuple(inputs()))


def test_lstm_cell_with_its_state_round_trips() -> None:
    torch.manual_seed(0)
    rebuilt = _check(CellWithState(), (torch.randn(2, 4), torch.randn(2, 5), torch.randn(2, 5)), nn.LSTMCell)
    assert rebuilt.cell.bias and rebuilt.cell.hidden_size == 5


WEIGHTED = [
    (nn.CrossEntropyLoss(weight=torch.tensor([0.5, 2.0, 1.0]), label_smoothing=0.1), "class"),
    (nn.NLLLoss(weight=torch.tensor([1.0, 0.0, 3.0]), reduction="sum"), "class"),
    (nn.MultiMarginLoss(p=1, margin=0.5, weight=torch.tensor([1.0, 2.0, 3.0])), "class"),
    (nn.BCELoss(weight=torch.tensor([1.0, 2.0, 0.5])), "prob"),
    (nn.BCEWithLogitsLoss(weight=torch.tensor([1.0, 2.0, 0.5]), pos_weight=torch.tensor([3.0, 1.0, 0.25])), "float"),
    (nn.BCEWithLogitsLoss(pos_weight=torch.tensor([3.0, 1.0, 0.25])), "float"),
    (nn.MultiLabelSoftMarginLoss(weight=torch.tensor([0.0, 1.0, 2.0])), "float"),
]


class Probabilities(nn.Module):
    """A scorer with a sigmoid, for ``BCELoss`` (its input must be in [0, 1])."""

    def __init__(self, loss: nn.Module) -> None:
        super().__init__()
        self.score = nn.Linear(4, 3)
        self.loss = loss

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self.loss(torch.sigmoid(self.score(x)), target)


@pytest.mark.parametrize(
    ("loss", "target"), WEIGHTED, ids=[f"{type(m).__name__}-{i}" for i, (m, _) in enumerate(WEIGHTED)]
)
def test_weighted_loss_keeps_its_weight_buffers(loss: nn.Module, target: str) -> None:
    torch.manual_seed(0)
    model = Probabilities(loss) if target == "prob" else Scored(loss)
    y = torch.tensor([0, 2, 1, 1]) if target == "class" else torch.rand(4, 3).round()
    rebuilt = _check(model, (torch.randn(4, 4), y), type(loss))
    for name in ("weight", "pos_weight"):
        want = getattr(loss, name, None)
        got = getattr(rebuilt.loss, name, None)
        assert (got is None) if want is None else torch.equal(got, want)
        assert (name in dict(rebuilt.loss.named_buffers())) == (want is not None)


def test_a_weight_in_the_data_or_a_bad_record_is_refused() -> None:
    build = ir2torch.get_default_converter().builders.get("crossentropyloss")
    with pytest.raises(IRFormatError, match="'weight'"):
        build(Implementation(name="loss", type="crossentropyloss", data={"weight": [1.0, 2.0]}))
    bad = {"weight": {"kind": "parameter", "shape": [3], "dtype": torch.float32}}
    with pytest.raises(IRFormatError, match="not a buffer"):
        build(Implementation(name="loss", type="crossentropyloss", state=bad))
    ok = {"weight": {"kind": "buffer", "shape": [3], "dtype": torch.float64, "persistent": True}}
    built = build(Implementation(name="loss", type="crossentropyloss", data={"reduction": "sum"}, state=ok))
    assert built.weight.shape == (3,) and built.weight.dtype == torch.float64 and built.reduction == "sum"

"""Buffers updated only in train mode outside handled leaves: flagged with ``TrainModeWarning`` at conversion."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common.testing.roundtrip import assert_roundtrip
from torch2ir.train.dropout import TrainModeWarning

U = "0.parametrizations.weight.0._u"
V = "0.parametrizations.weight.0._v"


def _spectral() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    torch.nn.utils.parametrizations.spectral_norm(model[0])
    return model


def _x() -> torch.Tensor:
    return torch.randn(3, 4, generator=torch.Generator().manual_seed(0))


def _train_warnings(model: nn.Module, x: torch.Tensor | None = None) -> tuple[list[str], object]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ir = torch2ir.convert(model, (_x() if x is None else x,))
    return [str(w.message) for w in caught if issubclass(w.category, TrainModeWarning)], ir


def test_spectral_norm_power_iteration_is_flagged_naming_module_and_buffers() -> None:
    model = _spectral().train()
    messages, ir = _train_warnings(model)
    assert len(messages) == 1
    assert "0.parametrizations.weight.0 (_u)" in messages[0] and "0.parametrizations.weight.0 (_v)" in messages[0]
    assert ir.root.meta["train_buffers"] == [U, V]
    # what the warning is about: a train-mode step updates the original's _u, never the rebuild's
    rebuilt = ir2torch.convert(ir, model.state_dict()).train()
    u0 = model.state_dict()[U].clone()
    model(_x())
    rebuilt(_x())
    assert not torch.equal(model.state_dict()[U], u0)
    assert torch.equal(rebuilt.state_dict()[U], u0)


@pytest.mark.filterwarnings("ignore::torch2ir.train.dropout.TrainModeWarning")  # assert_roundtrip converts again
def test_spectral_norm_in_eval_mode_round_trips_exactly_and_is_still_flagged() -> None:
    model = _spectral()
    model(_x())  # one train step: _u and _v are not their initial values
    model.eval()
    messages, _ = _train_warnings(model)
    assert len(messages) == 1 and "(_u)" in messages[0]  # the rebuild's train mode would still differ
    _, _, report = assert_roundtrip(model, (_x(),), atol=0, rtol=0)
    assert report.max_abs_diff == 0.0


def test_a_python_step_counter_only_in_train_mode_is_flagged() -> None:
    class Counted(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.register_buffer("steps", torch.zeros((), dtype=torch.long))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.training:
                self.steps.add_(1)
            return self.lin(x)

    model = nn.Sequential(Counted(), nn.ReLU()).train()
    messages, ir = _train_warnings(model)
    assert len(messages) == 1 and "0 (steps)" in messages[0]
    assert ir.root.meta["train_buffers"] == ["0.steps"]
    assert int(model[0].steps) == 0  # the meta pass left the real buffer alone


def test_updates_the_rebuild_replays_are_not_flagged() -> None:
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.norm = nn.BatchNorm1d(4)
            self.register_buffer("scale", torch.ones(4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.norm(self.lin(x))  # BatchNorm updates its running stats: a handled leaf, rebuilt as itself
            return nn.functional.dropout(y * self.scale, 0.1, self.training)

    model = nn.Sequential(Block(), nn.ReLU()).train()
    messages, ir = _train_warnings(model)
    assert messages == [] and "train_buffers" not in ir.root.meta
    assert_roundtrip(model, (_x(),))


def test_eager_qat_observer_updates_are_in_the_graph_and_not_flagged() -> None:
    from tests.torch2ir.test_hooks import _qat_model

    class Wrapped(nn.Module):  # reads `training`, so the train pass runs and sees the observers' writes
        def __init__(self) -> None:
            super().__init__()
            self.inner = _qat_model()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return nn.functional.dropout(self.inner(x), 0.1, self.training)

    from torch2ir.hierarchy.modules import ModuleTable
    from torch2ir.train.updates import train_only_updates, written_in_graph

    model = Wrapped().train()
    messages, ir = _train_warnings(model, torch.randn(2, 3, 6, 6))
    assert messages == [] and "train_buffers" not in ir.root.meta
    ep = torch.export.export(model, (torch.randn(2, 3, 6, 6),), strict=False)
    assert "inner.norm.activation_post_process.scale" in written_in_graph(ep)
    table = ModuleTable(model, torch2ir.get_default_converter())
    assert train_only_updates(model, (torch.randn(2, 3, 6, 6),), None, table, ep) == []


@pytest.mark.filterwarnings("ignore::torch2ir.train.dropout.TrainModeWarning")
def test_failed_meta_pass_is_recorded_not_guessed(monkeypatch) -> None:
    monkeypatch.setattr("torch2ir.train.passes.pass_device", lambda *a, **k: "meta")  # where values are needed
    class NeedsValues(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.register_buffer("seen", torch.zeros(4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.training:
                self.seen.copy_(x.detach().mean(0))
                _ = x.tolist()  # a value a meta tensor does not have: the meta pass fails
            return self.lin(x)

    _, ir = _train_warnings(nn.Sequential(NeedsValues(), nn.ReLU()).train())
    assert ir.root.meta["train_buffers"].startswith("not checked")


def test_a_buffer_reassigned_in_a_train_branch_is_flagged() -> None:
    """brevitas' TensorNorm (its bnn_pynq CNV/TFC/LFC networks): ``self.running_mean = ...`` in train mode, a
    reassignment rather than an in-place write, and a forward that normalises with the batch's statistics."""
    from brevitas_examples.bnn_pynq.models.tensor_norm import TensorNorm

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), TensorNorm()).train()
    messages, ir = _train_warnings(model)
    assert len(messages) == 1
    assert "1 (running_mean)" in messages[0] and "1 (running_var)" in messages[0]
    assert "computes otherwise when self.training is set" in messages[0] and ": 1;" in messages[0]
    assert ir.root.meta["train_buffers"] == ["1.running_mean", "1.running_var"]
    assert ir.root.meta["train_trace"] == "other computations only in train mode in: 1"
    rebuilt = ir2torch.convert(ir, model.state_dict())
    assert torch.equal(rebuilt.eval()(_x()), model.eval()(_x()))  # eval mode is exact
    # what the warning is about: in train mode the original normalises with the batch, the rebuild does not
    assert not torch.allclose(rebuilt.train()(_x()), model.train()(_x()))


def test_a_train_branch_that_computes_otherwise_is_flagged() -> None:
    class Doubled(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.training:
                return x * 2
            return x

    model = nn.Sequential(nn.Linear(4, 4), Doubled()).train()
    messages, ir = _train_warnings(model)
    assert len(messages) == 1 and "computes otherwise when self.training is set" in messages[0]
    assert "train_buffers" not in ir.root.meta
    assert ir.root.meta["train_trace"] == "other computations only in train mode in: 1"


def test_a_fast_path_check_in_eval_mode_is_not_a_computation() -> None:
    """``nn.TransformerEncoderLayer`` asks about its inputs (``is_nested``, devices) only in eval mode, to choose
    a fast path it does not take here: queries, not computations; its train mode rebuilds exactly."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.1, batch_first=True), 1,
                                  enable_nested_tensor=False)
    x = torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(0))
    messages, ir = _train_warnings(layer.train(), x)
    assert messages == [] and "other computations" not in ir.root.meta.get("train_trace", "")
    rebuilt = ir2torch.convert(ir, layer.state_dict()).train()
    torch.manual_seed(1)
    expected = layer(x)
    torch.manual_seed(1)
    assert torch.equal(rebuilt(x), expected)

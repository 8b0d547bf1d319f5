"""A batch norm a module computes in its own graph (a subclass of ``nn.BatchNorm2d`` with a forward of its own, as
timm's ``BatchNormAct2d``) is exact in train mode (issue 51, point 3): outputs, running statistics,
``num_batches_tracked`` and gradients equal the original's, no ``TrainModeWarning``; eval mode, folding and the
loop stay exact. One whose train-mode call is not its base's (``momentum=None``, another momentum in train mode)
is still warned about. A file's hostile arguments of ``ir.module_batch_norm`` are an ``IRError`` before anything
runs. timm's own: tests/ecosystems/test_timm_train_norms.py."""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import ir2torch
import torch2ir
from common import IR
from common.compare import equal
from common.errors import IRError
from common.python_functions import MODULE_BATCH_NORM
from common.rewrite import fold_batchnorm
from tests.helpers import assert_same_gradients
from torch2ir.train.dropout import TrainModeWarning


class BatchNormAct(nn.BatchNorm2d):
    """timm's ``BatchNormAct2d`` in short: the base's forward (copied, reading ``self.training``), then an
    activation child."""

    def __init__(self, channels: int, momentum: float | None = 0.1, train_momentum: float | None = None) -> None:
        super().__init__(channels, momentum=momentum)
        self.act = nn.Hardswish()
        self.train_momentum = train_momentum  # another momentum in train mode: not the base's forward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
            factor = self.train_momentum if self.train_momentum is not None else factor
        x = F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, self.training, factor,
                         self.eps)
        return self.act(x)


def _model(**options: float | None) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), BatchNormAct(4, **options), nn.Conv2d(4, 2, 1))
    for norm in (model[1],):
        norm.running_mean.uniform_(-1, 1)
        norm.running_var.uniform_(0.5, 2)
        norm.weight.data.uniform_(0.5, 1.5)
        norm.bias.data.uniform_(-0.5, 0.5)
        norm.num_batches_tracked.fill_(3)
    return model


X = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(1))


def _convert(model: nn.Module) -> tuple[IR, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ir = torch2ir.convert(model, (X,))
    return ir, [str(w.message) for w in caught if issubclass(w.category, TrainModeWarning)]


def _carried(ir: IR) -> int:
    return sum(a.get("implementation") == MODULE_BATCH_NORM for impl in ir.values() if impl.type == "module"
               for _, a in impl.graph.nodes(data=True))


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_train_mode_is_exact_outputs_statistics_counter_and_gradients(mode: str) -> None:
    model = _model().train(mode == "train")
    original, state = copy.deepcopy(model).train(), copy.deepcopy(model.state_dict())
    ir, messages = _convert(model)
    assert not messages and _carried(ir) == 1
    rebuilt = ir2torch.convert(ir, state).train()
    for steps in range(3):  # the running statistics and the counter move alike, step after step
        want, got = original(X), rebuilt(X)
        assert torch.equal(got, want), steps
        assert all(torch.equal(v, rebuilt.state_dict()[k]) for k, v in original.state_dict().items())
    assert int(rebuilt[1].num_batches_tracked) == 6 and isinstance(rebuilt[1], nn.BatchNorm2d)
    assert_same_gradients(original, rebuilt, (X,), {})
    original.eval(), rebuilt.eval()
    with torch.no_grad():
        assert torch.equal(rebuilt(X), original(X))
    assert all(torch.equal(v, rebuilt.state_dict()[k]) for k, v in original.state_dict().items())


def test_the_rebuild_converts_back_to_the_same_ir_and_through_a_file(tmp_path: Path) -> None:
    model = _model().eval()
    ir, _ = _convert(model)
    ir.save(tmp_path / "m.ir.json")
    loaded = IR.load(tmp_path / "m.ir.json")
    assert loaded == ir
    rebuilt = ir2torch.convert(loaded, model.state_dict())
    assert equal(torch2ir.convert(rebuilt, (X,)), ir)
    model.train(), rebuilt.train()
    assert torch.equal(rebuilt(X), model(X)) and torch.equal(rebuilt[1].running_var, model[1].running_var)


def test_it_folds_into_the_conv_before_it_and_keeps_its_activation() -> None:
    model = _model().eval()
    ir, _ = _convert(model)
    result = fold_batchnorm(ir, model.state_dict())
    assert result.count == 1 and not result.skipped
    rebuilt = ir2torch.convert(*result)
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in rebuilt.modules())
    with torch.no_grad():
        want = model(X)
        torch.testing.assert_close(rebuilt(X), want, atol=2e-6 * float(want.abs().max()), rtol=0)


def test_a_train_mode_other_than_the_base_is_still_warned() -> None:
    """Another momentum in train mode is not the base's forward: left as traced, and warned about."""
    ir, messages = _convert(_model(train_momentum=0.5).train())
    assert _carried(ir) == 0
    assert messages and "computes otherwise when self.training is set (the IR holds the eval-mode computation): 1" \
        in messages[0]


def test_a_cumulative_average_is_not_carried_and_said_unchecked() -> None:
    """``momentum=None`` divides by ``num_batches_tracked``'s value, which the train-mode pass on meta tensors cannot
    read: the batch norm is left as traced and the IR says train mode was not checked (as for any model whose
    train-mode forward reads values, docs/limitations.md)."""
    ir, _ = _convert(_model(momentum=None).train())
    assert _carried(ir) == 0
    assert str(ir.root.meta["train_trace"]).startswith("not checked")


HOSTILE = {
    "momentum string": (8, "0.1"), "momentum None": (8, None), "momentum nan": (8, {"$float": "nan"}),
    "eps inf": (9, {"$float": "inf"}),
    "eps list": (9, [1e-5]), "training string": (6, "yes"), "training int": (6, 1), "track None": (7, None),
    "weight number": (1, 3), "counter string": (5, "num_batches_tracked"),
    "statistics of the input": (3, {"$ref": "x"}), "counter of the input": (5, {"$ref": "x"}),
    "bias of the input": (2, {"$ref": "x"}),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_argument_is_an_ir_error_and_nothing_runs(name: str, tmp_path: Path) -> None:
    model = _model().eval()
    ir, _ = _convert(model)
    path = tmp_path / "m.ir.json"
    ir.save(path)
    data = json.loads(path.read_text())
    impl = data["implementations"]["1"]
    node = impl["nodes"]["batch_norm"]
    assert node["implementation"] == MODULE_BATCH_NORM
    position, value = HOSTILE[name]
    impl["edges"] = [e for e in impl["edges"] if not (e["dst"] == "batch_norm" and e["slot"] == position)]
    if isinstance(value, dict) and "$ref" in value:  # the module's input (the caller's tensor) where state goes
        impl["edges"].append({"src": "x", "dst": "batch_norm", "slot": position})
    node["args"][position] = value
    path.write_text(json.dumps(data))
    x = X.clone()
    state = copy.deepcopy(model.state_dict())
    with pytest.raises(IRError):
        rebuilt = ir2torch.convert(IR.load(path), state).train()
        rebuilt(x)
    assert torch.equal(x, X)
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())


class SuperBatchNorm(nn.BatchNorm2d):
    """A subclass calling the base's forward through ``super()`` (timm's ``SyncBatchNormAct`` does so), then an
    activation: its own bytecode never reads ``training``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(super().forward(x))


class Doubling(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 if self.training else x


class Shifted(Doubling):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + 1


def test_a_super_call_of_the_base_forward_is_followed_and_carried() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), SuperBatchNorm(4)).train()
    original, state = copy.deepcopy(model), copy.deepcopy(model.state_dict())
    ir, messages = _convert(model)
    assert not messages and _carried(ir) == 1
    rebuilt = ir2torch.convert(ir, state).train()
    assert torch.equal(rebuilt(X), original(X)) and torch.equal(rebuilt(X), original(X))
    assert all(torch.equal(v, rebuilt.state_dict()[k]) for k, v in original.state_dict().items())


def test_a_train_branch_reached_through_super_is_warned() -> None:
    """Before, the check read the subclass's bytecode alone and never ran: the train mode differed silently."""
    _, messages = _convert(nn.Sequential(nn.Linear(8, 3), Shifted()).train())
    assert messages and "computes otherwise when self.training is set" in messages[0]

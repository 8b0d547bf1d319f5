"""The cheap train-mode pass (:mod:`torch2ir.train.record`) and which leaves keep their call signature.

The meta-device pass must record what an exported train trace records, leave the model untouched, and give
way to the export when it cannot run; ``needs_signature`` decides which handled leaves export must keep.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import ir2torch
import torch2ir
from tests.helpers import max_abs_diff
from torch2ir.frontend.export import needs_signature
from torch2ir.hierarchy.modules import ModuleTable
from torch2ir.hierarchy.recover import Hierarchy
from torch2ir.train import record as train_record
from torch2ir.train.dropout import RANDOM_OPS, TrainModeWarning, train_ops_of


class _Attention(nn.Module):
    """BERT-style functional dropout: ``p`` depends on ``self.training``; a ``nn.Dropout`` leaf after it."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = torch.softmax(x @ x.transpose(-1, -2), -1)
        w = F.dropout(w, 0.3 if self.training else 0.0, training=self.training)
        h = F.scaled_dot_product_attention(x, x, x, dropout_p=0.1 if self.training else 0.0)
        return self.drop(self.proj(w @ x + h))


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = _Attention()
        self.b = _Attention()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(self.b(self.a(x)), 0.25, training=self.training)


class _DropPath(nn.Module):
    """Train-only randomness decided in Python: a random keep mask drawn with ``torch.rand``."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        if self.training:
            h = h * (torch.rand(x.shape[0], 1, 1, device=x.device) > 0.5)
        return h


class _ConstantAttr(_Net):
    """A plain tensor attribute (not a parameter or buffer): the meta pass cannot move it, so it fails (a pass on
    CPU copies copies it too)."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.full((8,), 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * self.scale


def _x() -> torch.Tensor:
    return torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(0))


def _seeded(cls: type[nn.Module]) -> nn.Module:
    torch.manual_seed(0)
    return cls().eval()


def test_meta_pass_records_what_the_exported_train_trace_holds() -> None:
    model = _seeded(_Net)
    table = ModuleTable(model, torch2ir.get_default_converter())
    fast = train_record.record_train_ops(model, (_x(),), None, table.is_leaf, RANDOM_OPS)
    assert fast is not None
    with torch2ir.frontend.export.traced_mode(model, training=True):
        ep = torch.export.export(model, (_x(),))
    slow = train_ops_of(Hierarchy(ep, table))
    sdpa = torch.ops.aten.scaled_dot_product_attention.default

    def p_of(target: object, args: tuple) -> float:  # dropout's p, SDPA's dropout_p (schema default 0.0)
        return (args[4] if len(args) > 4 else 0.0) if target == sdpa else args[1]

    for path in ("", "a", "b"):
        got = [(op.target, p_of(op.target, op.args)) for op in fast.dropouts[path]]
        want = [(n.target, p_of(n.target, n.args)) for n in slow.dropouts[path]]
        assert got == want, path
    assert [p for _, p in got] == [0.3, 0.1]  # b's dropout and SDPA, as written in train mode
    assert [p_of(op.target, op.args) for op in fast.dropouts[""]] == [0.25]
    assert "a.drop" not in fast.dropouts, "a handled leaf's own ops are not recorded"


class _Shared(nn.Module):
    """One Linear registered three times (``Sequential(lin, lin)``) and an embedding tied to a head, plus
    functional dropout so that the train pass has something to record."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.seq = nn.Sequential(self.lin, self.lin)
        self.emb = nn.Embedding(8, 8)
        self.head = nn.Linear(8, 8, bias=False)
        self.head.weight = self.emb.weight
        self.norm = nn.BatchNorm1d(5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.seq(x) + self.lin(x))
        return self.head(F.dropout(h, 0.1, self.training))


@pytest.mark.parametrize("cls", [_Net, _Shared])
def test_meta_pass_leaves_the_model_untouched(cls: type[nn.Module]) -> None:
    model = _seeded(cls)
    objects = {k: id(v) for k, v in (*model.named_parameters(remove_duplicate=False),
                                     *model.named_buffers(remove_duplicate=False))}
    before = {k: v.clone() for k, v in model.state_dict().items()}
    hooks = (dict(nn.modules.module._global_forward_pre_hooks), dict(nn.modules.module._global_forward_hooks))
    table = ModuleTable(model, torch2ir.get_default_converter())
    assert train_record.record_train_ops(model, (_x(),), None, table.is_leaf, RANDOM_OPS) is not None
    assert not any(m.training for m in model.modules())
    after = {k: id(v) for k, v in (*model.named_parameters(remove_duplicate=False),
                                   *model.named_buffers(remove_duplicate=False))}
    assert after == objects, "the very same parameter and buffer objects, shared ones included"
    assert all(t.device.type == "cpu" for t in model.state_dict().values())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert (dict(nn.modules.module._global_forward_pre_hooks), dict(nn.modules.module._global_forward_hooks)) == hooks


def test_meta_pass_failure_inside_forward_restores_the_model() -> None:
    model = _seeded(_Shared)
    ids = [id(p) for p in model.parameters()]
    table = ModuleTable(model, torch2ir.get_default_converter())
    bad = torch.randn(2, 5, 3)  # wrong feature size: the forward pass raises halfway
    assert train_record.record_train_ops(model, (bad,), None, table.is_leaf, RANDOM_OPS) is None
    assert [id(p) for p in model.parameters()] == ids
    assert all(p.device.type == "cpu" for p in model.parameters()) and not model.training


def test_meta_pass_counts_train_only_random_ops() -> None:
    model = _seeded(_DropPath)
    table = ModuleTable(model, torch2ir.get_default_converter())
    ops = train_record.record_train_ops(model, (_x(),), None, table.is_leaf, RANDOM_OPS)
    assert ops is not None and ops.randoms == {"": 1}
    with pytest.warns(TrainModeWarning, match="random ops only in train mode in: root"):
        ir = torch2ir.convert(model, (_x(),))
    assert "random ops only in train mode in: root" in ir.root.meta["train_trace"]


@pytest.fixture
def exports(monkeypatch) -> list[int]:
    """Records one entry per ``torch.export.export`` call."""
    calls: list[int] = []
    real_export = torch.export.export
    monkeypatch.setattr(torch.export, "export", lambda *a, **k: calls.append(1) or real_export(*a, **k))
    return calls


@pytest.fixture
def meta_passes(monkeypatch) -> None:
    """The eager passes on meta even where CPU copies would be cheaper (the failures only meta has)."""
    monkeypatch.setattr("torch2ir.train.passes.pass_device", lambda *a, **k: "meta")


@pytest.mark.usefixtures("meta_passes")
def test_meta_pass_failure_returns_none_and_conversion_falls_back_to_cpu_copies(exports: list[int]) -> None:
    model = _seeded(_ConstantAttr)
    table = ModuleTable(model, torch2ir.get_default_converter())
    assert train_record.record_train_ops(model, (_x(),), None, table.is_leaf, RANDOM_OPS) is None
    ir = torch2ir.convert(model, (_x(),))
    assert len(exports) == 1, "the pass on CPU copies replaces the export-based train trace"
    assert ir.root.meta["train_trace"] == "applied"
    _assert_train_mode_exact(model, ir)


def test_converted_train_mode_is_exact_through_the_meta_pass(exports: list[int]) -> None:
    model = _seeded(_Net)
    ir = torch2ir.convert(model, (_x(),))
    assert len(exports) == 1, "the meta pass replaces the second export"
    assert ir.root.meta["train_trace"] == "applied"
    _assert_train_mode_exact(model, ir)


def _assert_train_mode_exact(model: nn.Module, ir: torch2ir.IR) -> None:
    new = ir2torch.convert(ir, model.state_dict())
    model.train()
    new.train()
    try:
        torch.manual_seed(1)
        expected = model(_x())
        torch.manual_seed(1)
        assert max_abs_diff(expected, new(_x())) == 0.0
        assert not torch.equal(expected, model.eval()(_x())), "dropout was active in train mode"
    finally:
        model.eval()


class _UserBlock(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


@pytest.mark.parametrize(
    ("module", "needed"),
    [
        (nn.Linear(2, 2), False),
        (nn.ReLU(), False),
        (nn.LayerNorm(2), False),
        (nn.Embedding(3, 2), False),
        (nn.MaxPool2d(2), False),
        (nn.MaxPool2d(2, return_indices=True), True),  # returns a tuple
        (nn.MultiheadAttention(4, 2), True),  # several inputs
        (nn.LSTM(2, 2), True),  # optional hx, tuple result
        (nn.Bilinear(2, 2, 2), True),
        (_UserBlock(), True),  # outside torch.nn: a user's handler may return anything
    ],
)
def test_which_handled_leaves_keep_their_call_signature(module: nn.Module, needed: bool) -> None:
    assert needs_signature(module) is needed


class _HelperReadsTraining(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._maybe_drop(x)

    def _maybe_drop(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 if self.training else x


class _LambdaReadsTraining(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (lambda t: t + 1 if self.training else t)(x)


class _Plain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.lin(x)) + self.helper(x)

    def helper(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(-1, keepdim=True)


@pytest.mark.parametrize(
    ("cls", "reads"),
    [(_DropPath, True), (_HelperReadsTraining, True), (_LambdaReadsTraining, True), (_Net, True),
     (_Plain, False), (nn.Sequential, False)],
)
def test_reads_training_finds_train_mode_branches_in_the_bytecode(cls: type, reads: bool) -> None:
    assert train_record.reads_training(cls) is reads


def test_meta_pass_runs_only_where_train_mode_can_differ(monkeypatch) -> None:
    calls = []
    real = train_record.record_train_ops
    monkeypatch.setattr("torch2ir.train.passes.record_train_ops", lambda *a, **k: calls.append(1) or real(*a, **k))
    ir = torch2ir.convert(_seeded(_Plain), (_x(),))
    assert calls == [] and "train_trace" not in ir.root.meta  # no dropout op, nothing reads `training`
    with pytest.warns(TrainModeWarning):
        torch2ir.convert(_seeded(_DropPath), (_x(),))
    assert calls == [1, 1]  # the train-mode pass, and the eval-mode one its calls are compared with

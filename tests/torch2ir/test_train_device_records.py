"""What the eager train-mode passes record on CPU copies (:mod:`torch2ir.train.device`) against meta: the same
records and conversions, no value read that meta could not make, the model, its plain tensor attributes and the
random-number state left as they were, a failed pass run again on meta and both modes compared on one device."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import torch2ir
from tests.torch2ir.test_train_record import _DropPath, _Net, _seeded, _Shared, _x
from tests.torch2ir.trace_once_spies import instances
from torch2ir.hierarchy.modules import ModuleTable
from torch2ir.train import device as train_device
from torch2ir.train import record as train_record
from torch2ir.train.dropout import RANDOM_OPS


def _records(model: nn.Module, args: tuple, device: str, training: bool = True, ran_on: str | None = None) -> dict:
    table = ModuleTable(model, torch2ir.get_default_converter())
    ops = train_record.record_train_ops(model, args, None, table.is_leaf, RANDOM_OPS, training=training,
                                        device=device)
    assert ops is not None and ops.device == (ran_on or device)
    names = {id(t): n for n, t in (*model.named_parameters(), *model.named_buffers())}
    dropouts = {path: [(op.target, [a for a in op.args if not isinstance(a, torch.Tensor)]) for op in recorded]
                for path, recorded in ops.dropouts.items()}
    return {"dropouts": dropouts, "randoms": ops.randoms, "calls": ops.calls,
            "written": sorted(names[i] for i in ops.written if i in names)}


class _Norm(nn.Module):
    """Writes a buffer in train mode only (as BatchNorm's running statistics)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.register_buffer("mean", torch.zeros(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.mean.mul_(0.9).add_(0.1 * x.detach().mean((0, 1)))
        return F.dropout(self.lin(x - self.mean), 0.2, self.training)


@pytest.mark.parametrize("cls", [_Net, _Shared, _DropPath, _Norm])
@pytest.mark.parametrize("training", [True, False])
def test_a_pass_on_cpu_records_what_the_pass_on_meta_records(cls: type[nn.Module], training: bool) -> None:
    model = _seeded(cls)
    assert _records(model, (_x(),), "cpu", training) == _records(model, (_x(),), "meta", training)


class _Counting(nn.Module):
    """Keeps a plain tensor attribute it updates in place in train mode, beside a buffer and dropout."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.seen = torch.zeros(8)
        self.register_buffer("mean", torch.zeros(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.seen.add_(x.detach().sum((0, 1)))
            self.mean.copy_(x.detach().mean((0, 1)))
            x = x * (torch.rand(x.shape[0], 1, 1) > 0.5)
        return F.dropout(self.lin(x), 0.3, self.training) + self.seen


def test_a_pass_on_cpu_leaves_the_model_its_attributes_and_the_random_state_untouched() -> None:
    model = _seeded(_Counting)
    objects = {n: id(t) for n, t in (*model.named_parameters(), *model.named_buffers())}
    values = {n: t.clone() for n, t in (*model.named_parameters(), *model.named_buffers())}
    seen, seen_value = model.seen, model.seen.clone()
    state = torch.get_rng_state()
    table = ModuleTable(model, torch2ir.get_default_converter())
    ops = train_record.record_train_ops(model, (_x(),), None, table.is_leaf, RANDOM_OPS, device="cpu")
    assert ops is not None and ops.randoms == {"": 1}
    assert id(model.mean) in ops.written, "the copy's write is seen"
    assert torch.equal(torch.get_rng_state(), state), "dropout and torch.rand on CPU drew from a forked generator"
    assert model.seen is seen and torch.equal(seen, seen_value), "the plain attribute was swapped for a copy"
    assert {n: id(t) for n, t in (*model.named_parameters(), *model.named_buffers())} == objects
    assert all(torch.equal(values[n], t) for n, t in (*model.named_parameters(), *model.named_buffers()))
    assert not model.training


class _CpuOnlyFailure(_Net):
    """Fails on CPU values only (as a CPU kernel missing for a dtype would): the pass runs again on meta."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type == "cpu":
            raise RuntimeError("no CPU kernel")
        return super().forward(x)


def test_a_pass_failing_on_cpu_runs_again_on_meta() -> None:
    model = _seeded(_CpuOnlyFailure)
    assert _records(model, (_x(),), "cpu", ran_on="meta") == _records(model, (_x(),), "meta")


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.dropout(self.lin(x), 0.1, self.training)
        if self.training:  # DropPath
            h = h * (torch.rand(x.shape[0], 1, 1) > 0.2)
        return x + h


class _Stack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(_Block() for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def _converted(model: nn.Module, device: str | None, monkeypatch, **options) -> tuple[torch2ir.IR, list[str]]:
    with monkeypatch.context() as patch:
        if device is not None:
            patch.setattr("torch2ir.train.passes.pass_device", lambda *a, **k: device)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ir = torch2ir.convert(model, (_x(),), **options)
    return ir, sorted(str(w.message) for w in caught if "torch2ir" in str(w.message))


@pytest.mark.parametrize("trace_once", [True, False])
def test_conversion_with_passes_on_cpu_equals_the_one_on_meta(trace_once: bool, monkeypatch) -> None:
    model = _seeded(_Stack)
    with monkeypatch.context() as patch:
        chosen: list[str] = []
        real = train_device.pass_device
        patch.setattr("torch2ir.train.passes.pass_device", lambda *a, **k: chosen.append(real(*a, **k)) or "cpu")
        made = instances(patch)
        torch2ir.convert(model, (_x(),), trace_once=trace_once)
    assert chosen == ["cpu"]
    assert bool(made and made[-1]) is trace_once, "with trace_once, the eager passes stand blocks in too"
    cpu_ir, cpu_warnings = _converted(model, "cpu", monkeypatch, trace_once=trace_once)
    meta_ir, meta_warnings = _converted(model, "meta", monkeypatch, trace_once=trace_once)
    assert cpu_ir == meta_ir
    assert cpu_warnings == meta_warnings and any("random ops only in train mode" in w for w in cpu_warnings)


class _ValueBranch(nn.Module):
    """Train mode branches on a value: recorded on one example's values, the branch would pass for the model's."""

    def __init__(self, read: str) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.register_buffer("seen", torch.zeros(8))
        self.read = read

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.dropout(self.lin(x), 0.1, self.training)
        if self.training:
            self.seen.copy_(x.detach().mean((0, 1)))
            if self.read == "bool" and h.sum() > 0:
                h = h * 2
            elif self.read == "item":
                h = h * h.max().item()
            elif self.read == "tolist":
                h = h * len([v for v in h.flatten().tolist() if v > 0])
            elif self.read == "mask":
                h = h[h > 0].sum() + h
        return h


@pytest.mark.parametrize("read", ["bool", "item", "tolist", "mask"])
def test_a_pass_on_cpu_reads_no_value_the_pass_on_meta_cannot(read: str, monkeypatch) -> None:
    model = _seeded(lambda: _ValueBranch(read))
    table = ModuleTable(model, torch2ir.get_default_converter())
    for device in ("cpu", "meta"):
        assert train_record.record_train_ops(model, (_x(),), None, table.is_leaf, RANDOM_OPS, device=device) is None
    recorder = train_record._Recorder(lambda: None, RANDOM_OPS, train_record.TrainOps(), train_record._Flows(),
                                      guarded=True)  # a pass on CPU copies': a read fails at once or on meta
    with pytest.raises(train_device.ValueRead), recorder:
        model.train()(_x())
    model.eval()
    on_cpu, cpu_warnings = _converted(model, "cpu", monkeypatch)
    on_meta, meta_warnings = _converted(model, "meta", monkeypatch)
    assert on_cpu == on_meta and cpu_warnings == meta_warnings
    assert on_cpu.root.meta["train_buffers"].startswith("not checked")


class _Gather(nn.Module):
    """Indexes by positions (Swin's relative position bias), which meta sizes without values."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(5, 8))
        self.register_buffer("index", torch.tensor([[0, 2], [4, 1]]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(x + self.table[self.index].sum(1)[:, None], 0.1, self.training)


def test_index_by_positions_is_no_value_read() -> None:
    model = _seeded(_Gather)
    table = ModuleTable(model, torch2ir.get_default_converter())
    on_cpu = train_record._record(model, (torch.randn(2, 3, 8),), None, table.is_leaf, RANDOM_OPS, True, None, "cpu")
    assert on_cpu is not None and on_cpu.randoms == {} and len(on_cpu.dropouts[""]) == 1


class _FusedAttention(nn.Module):
    """On CPU, attention with dropout (train mode) runs the math kernel and without it (eval) the fused one, whose
    outputs' strides differ: ``.contiguous()`` copies in one mode only, and is no computation of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(8, 24)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).view(2, 5, 3, 2, 4).permute(2, 0, 3, 1, 4)
        h = F.scaled_dot_product_attention(q, k, v, dropout_p=0.1 if self.training else 0.0)
        return h.transpose(1, 2).contiguous().reshape(2, 5, 8)


def test_a_layout_copy_in_one_mode_only_is_not_another_computation(monkeypatch) -> None:
    model = _seeded(_FusedAttention)
    train, evaluated = _records(model, (_x(),), "cpu"), _records(model, (_x(),), "cpu", training=False)
    assert train["calls"] == evaluated["calls"]
    assert train["calls"][""][0] == "module qkv", "what the copy was made of still reaches the result"
    ir, messages = _converted(model, "cpu", monkeypatch)
    assert ir.root.meta["train_trace"] == "applied" and messages == []


def test_the_recorders_tensor_walk_finds_what_pytree_finds() -> None:
    from collections import OrderedDict, namedtuple

    pair = namedtuple("pair", "a b")
    t = [torch.randn(2) for _ in range(6)]
    value = ((t[0], [t[1], {"x": t[2], "y": (3, None, torch.float32)}]),
             {"z": OrderedDict(w=t[3]), "p": pair(t[4], "s")}, slice(1, 2), t[5], t[0])
    expected = [x for x in torch.utils._pytree.tree_leaves(value) if isinstance(x, torch.Tensor)]
    found = train_record._tensors(value)
    assert sorted(map(id, found)) == sorted(map(id, expected)) and len(found) == 7


class _EvalFailsOnCpu(_Net):
    """Its eval-mode pass fails on CPU copies only: that pass runs on meta, and so does the train-mode one it is
    compared with (layouts, and so what counts as a copy, may differ between devices)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training and type(x) is torch.Tensor and x.device.type == "cpu":  # (export's are fake)
            raise RuntimeError("no CPU kernel in eval mode")
        return super().forward(x)


def test_the_two_modes_are_compared_on_one_device(monkeypatch) -> None:
    devices: list[tuple[bool, str]] = []
    real = train_record.record_train_ops

    def spy(*args, **kwargs):
        ops = real(*args, **kwargs)
        devices.append((kwargs.get("training", True), ops.device))
        return ops

    monkeypatch.setattr("torch2ir.train.passes.record_train_ops", spy)
    model = _seeded(_EvalFailsOnCpu)
    ir, messages = _converted(model, "cpu", monkeypatch)
    assert devices == [(True, "cpu"), (False, "meta"), (True, "meta")]
    on_meta, meta_messages = _converted(model, "meta", monkeypatch)
    assert ir == on_meta and messages == meta_messages

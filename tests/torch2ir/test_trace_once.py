"""``convert(..., trace_once=...)`` (prototype): alike blocks traced once give the IR of a full trace, exactly."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils import _pytree as pytree

import ir2torch
import torch2ir
from common.errors import IRError
from torch2ir.trace_once.trace import alike_groups

pytest.importorskip("transformers")

from tests.real.corpus import CORPUS
from tests.torch2ir.trace_once_spies import exports as _exports
from tests.torch2ir.trace_once_spies import full_and_once as _full_and_once
from tests.torch2ir.trace_once_spies import instances as _instances

ARCHES = {a.name: a for a in CORPUS}


@pytest.mark.parametrize("name", ["llama", "bert"])
def test_trace_once_equals_full_trace(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    arch = ARCHES[name]
    model = arch.build().eval()
    args, kwargs = arch.inputs()
    made = _instances(monkeypatch)
    full = torch2ir.convert(model, args, kwargs, allow=arch.allow, trace_once=False)
    once = torch2ir.convert(model, args, kwargs, allow=arch.allow, trace_once=("layer_idx",))
    assert made and made[-1], "the second layer was stood in for and became an instance"
    for impl in once.values():
        _ = impl.graph  # expands every instance
    assert once == full
    rebuilt = ir2torch.convert(once, model.state_dict()).eval()
    with torch.no_grad():
        expected = pytree.tree_leaves(model(*args, **(kwargs or {})))
        got = pytree.tree_leaves(rebuilt(*args, **(kwargs or {})))
    assert len(expected) == len(got)
    assert all(torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b for a, b in zip(expected, got))


def test_decoder_layers_differing_in_layer_idx_are_grouped_with_it_watched() -> None:
    model = ARCHES["llama"].build()
    groups = {tuple(g.paths): g for g in alike_groups(model)}
    layers = groups[("model.layers.0", "model.layers.1")]
    assert ("self_attn", "layer_idx") in layers.watched
    vouched = {tuple(g.paths): g for g in alike_groups(model, ("layer_idx",))}
    assert vouched[("model.layers.0", "model.layers.1")].watched == []  # the caller vouched: nothing to watch


@pytest.mark.parametrize("name", ["llama", "bert"])
def test_trace_once_with_indices_watched_equals_full_trace(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``trace_once=True``: layers told apart by ``layer_idx`` only are traced once; their calls (no key/value
    cache here) never read it, so the IR is the full trace's."""
    arch = ARCHES[name]
    model = arch.build().eval()
    args, kwargs = arch.inputs()
    full = torch2ir.convert(model, args, kwargs, allow=arch.allow, trace_once=False)
    made = _instances(monkeypatch)
    once = torch2ir.convert(model, args, kwargs, allow=arch.allow, trace_once=True)
    assert made and made[-1]
    for impl in once.values():
        _ = impl.graph
    assert once == full


class _Indexed(nn.Module):
    """A block that knows its position; ``reads`` says where (if anywhere) its forward reads it."""

    def __init__(self, index: int, reads: str) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.index = index
        self.reads = reads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        if self.reads == "forward" and self.index == 1:
            y = y * 2
        if self.reads == "helper" and _position(self) == 2:
            y = y - 1
        if self.reads == "train" and self.training and self.index == 2:
            y = y + torch.rand_like(y)  # train-only randomness in the last block (stood in for in eval) only
        return y


def _position(module: nn.Module) -> int:
    return getattr(module, "index")  # noqa: B009 - read by name, as library code does


@pytest.mark.parametrize(("reads", "stood_in"), [("nothing", True), ("forward", False), ("helper", False),
                                                 ("train", True)])
def test_a_block_reading_its_index_is_traced_in_full(reads: str, stood_in: bool,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(*[_Indexed(i, reads) for i in range(3)]).eval()
    x = torch.randn(2, 4)
    (group,) = [g for g in alike_groups(model) if "." not in g.paths[0]]  # the blocks (their Linears nest)
    assert group.watched == [("", "index")]
    full, once = _full_and_once(model, x, stood_in, monkeypatch)
    assert "index" not in vars(_Indexed)  # the watch is gone
    for impl in once.values():
        _ = impl.graph
    assert once == full  # train notes included: the train-mode pass ran every block for real
    # a group traced in full after all is named on the capture, with why
    assert once.capture.trace_once_fallbacks == ([] if stood_in else [
        ("_Indexed", "its call reads index, which differs between the alike blocks")])
    rebuilt = ir2torch.convert(once, model.state_dict()).eval()
    with torch.no_grad():
        assert torch.equal(rebuilt(x), model(x))


def test_an_index_differing_between_some_blocks_only_keeps_them_apart() -> None:
    model = nn.Sequential(*[_Indexed(i % 2, "nothing") for i in range(4)])
    assert sorted(g.paths for g in alike_groups(model)) == [["0", "2"], ["0.lin", "1.lin", "2.lin", "3.lin"],
                                                            ["1", "3"]]


class _Counter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls = self.calls + 1  # an attribute change: no stand-in can repeat it
        return self.lin(x)


class _Ident(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.lin(x)
        return x  # returns its input: a stand-in would return a new tensor


class _Plain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.lin(x))


@pytest.mark.parametrize(("block", "stood_in"), [(_Plain, True), (_Counter, False), (_Ident, False)])
def test_blocks_a_stand_in_cannot_repeat_are_traced_in_full(block: type[nn.Module], stood_in: bool,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(block(), block(), block()).eval()
    x = torch.randn(2, 4)
    full, once = _full_and_once(model, x, stood_in, monkeypatch)
    for impl in once.values():
        _ = impl.graph
    assert once == full


class _MutatesInput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        x.add_(1.0)  # the caller's tensor changes: a stand-in would leave it as it is
        return y


class _MutatesState(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("seen", torch.zeros(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.add_(x.sum(0))  # its own buffer changes
        return self.lin(x)


class _DataDependent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        return y[y > 0].reshape(-1, 1).expand(-1, 4)  # a size only the values decide (an unbacked symbol)


class _NonTensorOutput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.dtype]:
        return self.lin(x), x.dtype  # a dtype: neither a tensor nor a plain scalar, a leaf no stand-in repeats


class _Stack(nn.Module):
    def __init__(self, block: type[nn.Module]) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(block() for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for blk in self.blocks:
            out = blk(x)
            x = out[0] if isinstance(out, tuple) else out
        return x


@pytest.mark.parametrize("block", [_MutatesInput, _MutatesState, _DataDependent, _NonTensorOutput])
def test_more_blocks_a_stand_in_cannot_repeat_give_the_full_trace(block: type[nn.Module],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 4)
    full_model, once_model = _Stack(block).eval(), _Stack(block).eval()
    once_model.load_state_dict(full_model.state_dict())
    try:
        full = torch2ir.convert(full_model, (x.clone(),), trace_once=False)
    except IRError as exc:  # a construct the IR refuses: refused the same way with trace_once
        with pytest.raises(type(exc)):
            torch2ir.convert(once_model, (x.clone(),), trace_once=True)
        return
    made = _instances(monkeypatch)
    once = torch2ir.convert(once_model, (x.clone(),), trace_once=True)
    assert not any(made)
    for impl in once.values():
        _ = impl.graph
    assert once == full


class _Passing(nn.Module):
    """A block returning its input next to its result (an output aliasing an input: no stand-in can repeat it)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.lin(x), x


class _Chain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(_Passing() for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x
        for block in self.blocks:
            y, kept = block(out)
            out = y + kept
        return out


def test_a_group_failing_before_any_stand_in_is_traced_in_full_in_the_same_export(monkeypatch):
    torch.manual_seed(0)
    model, x = _Chain().eval(), torch.randn(2, 4)
    exports = _exports(monkeypatch)
    full = torch2ir.convert(model, (x,), trace_once=False)
    once = torch2ir.convert(model, (x,), trace_once=True)
    assert len(exports) == 2  # one each: the failed group did not cost a second export
    assert once == full
    assert once.capture.trace_once_fallbacks == [("_Passing", "an output aliases an input or a parameter/buffer")]
    rebuilt = ir2torch.convert(once, model.state_dict())
    assert torch.equal(rebuilt(x), model(x))

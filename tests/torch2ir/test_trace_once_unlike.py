"""Blocks that look alike but are not: each is kept apart, run for real, or the model traced in full, so the IR
is the full trace's and the rebuild exact (every case found by a model that a stand-in silently got wrong)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from tests.torch2ir.trace_once_spies import assert_full_trace as _assert_full_trace
from tests.torch2ir.trace_once_spies import exports as _exports
from tests.torch2ir.trace_once_spies import full_and_once as _full_and_once
from tests.torch2ir.trace_once_spies import instances as _instances
from torch2ir.trace_once.trace import alike_groups


class _Scaled(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale


class _SignedZeros(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = _Scaled(0.0), _Scaled(-0.0), _Scaled(0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([self.a(x), self.b(x), self.c(x)])


def test_attributes_are_compared_as_spelled() -> None:
    """``-0.0 == 0.0`` in Python, but a block scaling by ``-0.0`` flips signs: it is not alike one scaling by
    ``0.0`` (and the rebuild keeps every sign bit)."""
    model = _SignedZeros().eval()
    assert [g.paths for g in alike_groups(model)] == [["a", "c"]]
    x = torch.tensor([1.0, -2.0])
    rebuilt = ir2torch.convert(torch2ir.convert(model, (x,), trace_once=True), model.state_dict())
    assert torch.equal(torch.signbit(rebuilt(x)), torch.signbit(model(x)))


class _Pair(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.q(a) * self.k(b)


class _OneTensorThenTwo(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = _Pair(), _Pair()

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(x)
        return self.first(h, h) + self.second(h, y)


def test_a_block_called_with_one_tensor_twice_does_not_stand_in_for_one_called_with_two(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The first block's trace reads one value for both arguments; the second gets two different tensors of the
    same metadata, so it is traced itself (a stand-in would make its graph ignore ``b``)."""
    torch.manual_seed(0)
    model = _OneTensorThenTwo().eval()
    x, y = torch.randn(2, 4), torch.randn(2, 4)
    made = _instances(monkeypatch)
    ir = torch2ir.convert(model, (x, y), trace_once=True)
    assert not any(made)
    rebuilt = ir2torch.convert(ir, model.state_dict())
    with torch.no_grad():
        assert torch.equal(rebuilt(x, y), model(x, y))


class _PassingOnOneRow(nn.Module):
    """Returns its input when called with one row, else computes."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x if x.shape[0] == 1 else torch.relu(self.lin(x))


class _TwoSignatures(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(_PassingOnOneRow() for _ in range(6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks[:3]:
            x = block(x)
        y = x[:1]
        for block in self.blocks[3:]:
            y = block(y)
        return x + y


def test_a_key_unfit_after_stand_ins_were_given_runs_for_real_in_the_same_export(monkeypatch):
    """Blocks 0-2 get two rows (block 2 is stood in for block 1), blocks 3-5 one row, which they return as is: a
    stand-in cannot repeat that, so those run for real; block 2's stand-in stays, and no second export runs."""
    torch.manual_seed(0)
    model, x = _TwoSignatures().eval(), torch.randn(2, 4)
    exports = _exports(monkeypatch)
    full = torch2ir.convert(model, (x,), trace_once=False)
    made = _instances(monkeypatch)
    once = torch2ir.convert(model, (x,))
    assert len(exports) == 2
    assert made and set(made[-1]) == {"blocks.2", "blocks.2.lin"}
    assert once.capture.trace_once_fallbacks == [("_PassingOnOneRow", "an output aliases an input or a "
                                                  "parameter/buffer (for the members called like it; the others "
                                                  "were stood in for)")]
    assert once == full
    assert torch.equal(ir2torch.convert(once, model.state_dict())(x), model(x))
    flat = once.lower()
    assert torch.equal(ir2torch.convert(flat, model)(x), model(x))


class _CountsPositives(nn.Module):
    """Makes a data-dependent size inside (``nonzero``), returns a fixed-size result."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        picked = y[y > 0]
        return y + picked.sum()


def test_blocks_making_data_dependent_sizes_are_traced_in_full(monkeypatch):
    """Each block's data-dependent sizes are symbols of its own (``u0`` in the first, ``u1`` in the next): a
    stand-in would give the others the first one's."""
    torch.manual_seed(0)
    model, x = nn.Sequential(*(_CountsPositives() for _ in range(3))).eval(), torch.randn(2, 4)
    full, once = _full_and_once(model, x, stood_in=False, monkeypatch=monkeypatch)
    assert once == full
    assert once.capture.trace_once_fallbacks == [
        ("_CountsPositives", "its call makes data-dependent sizes (unbacked symbols)")]
    assert torch.equal(ir2torch.convert(once, model.state_dict())(x), model(x))


class _InPlaceAfter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(4, 4)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(4, 4), nn.Tanh()) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        for block in self.blocks:
            out = block(x)
            out += x  # torchvision's MBConv: an in-place add on the block's result
            x = out
        return x


def test_a_stand_ins_output_can_be_written_in_place(monkeypatch):
    """A stand-in's output that requires grad is not a leaf (found on torchvision's EfficientNet: ``result +=
    input`` on a leaf failed the export with stand-ins, which fell back to a second, full export)."""
    torch.manual_seed(0)
    model, x = _InPlaceAfter().eval(), torch.randn(2, 4)
    full, once = _full_and_once(model, x, stood_in=True, monkeypatch=monkeypatch)
    assert once.capture.trace_once_fallbacks == []
    assert once == full
    assert torch.equal(ir2torch.convert(once, model.state_dict())(x), model(x))
    assert torch.equal(ir2torch.convert(once.lower(), model)(x), model(x))


class _Scaled2(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * scale


class _ScalesPerBlock(nn.Module):
    """Each block gets a ``detach`` made for it alone (brevitas detaches its zero point and bit width): for a
    stood-in block nothing reads it, so export drops it."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.rand(4))
        self.blocks = nn.ModuleList(_Scaled2() for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x, self.scale.detach())
        return x


def test_a_stood_in_call_whose_input_export_dropped_is_traced_in_full() -> None:
    """Found on brevitas (the zero point and bit width given to each ``int_quant``): the instance would have read
    the dropped value's stand-in (NaN); the model is exported in full instead, and says why."""
    torch.manual_seed(0)
    model, x = _ScalesPerBlock().eval(), torch.randn(2, 4)
    once = torch2ir.convert(model, (x,))
    assert once == torch2ir.convert(model, (x,), trace_once=False)
    assert once.capture.trace_once_fallbacks == [
        ("the model", "an input of stood-in 'blocks.2' was removed as dead code")]
    with torch.no_grad():
        assert torch.equal(ir2torch.convert(once, model.state_dict())(x), model(x))


class _Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class _SharedPre(nn.Module):
    """A module reached by two paths (CoaT shares its positional convolution between blocks): export then traces
    through attribute proxies, which name each submodule by the path it was reached by. ``direct``: the blocks'
    ``forward`` is called directly, not as a module call (SqueezeBERT)."""

    def __init__(self, direct: bool) -> None:
        super().__init__()
        self.pre = nn.Linear(8, 8)
        self.blocks = nn.ModuleList(_Mlp() for _ in range(3))
        self.again = self.pre
        self.direct = direct

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pre(x)
        for block in self.blocks:
            x = x + (block.forward(x) if self.direct else block(x))
        return self.again(x)


@pytest.mark.parametrize("direct", [False, True])
def test_blocks_of_a_model_with_a_shared_module_keep_their_paths(direct: bool,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The traced block's leaves are named from the model (``blocks.0.fc1``), not from the block (``fc1``): the
    stand-in forward runs on the proxy export called, not on the module it wraps."""
    torch.manual_seed(0)
    model = _SharedPre(direct).eval()
    x = torch.randn(2, 8)
    full, once = _full_and_once(model, x, not direct, monkeypatch)  # a direct call is never stood in for
    if not direct:
        assert [a["implementation"] for _, a in full["blocks.0"].graph.nodes(data=True) if a["type"] == "linear"
                ] == ["blocks.0.fc1", "blocks.0.fc2"]
    _assert_full_trace(once, full, model, x)


class _SharedPreIndexed(_SharedPre):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pre(x)
        for i in range(len(self.blocks)):
            x = x + self.blocks[i].forward(x)  # the proxy is a temporary: in no variable of the caller
        return self.again(x)


def test_a_direct_forward_call_through_an_unknown_proxy_is_traced_in_full(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    model = _SharedPreIndexed(direct=True).eval()
    x = torch.randn(2, 8)
    full = torch2ir.convert(model, (x,), trace_once=False)
    ran = _exports(monkeypatch)
    once = torch2ir.convert(model, (x,))
    assert len(ran) == 2  # the export with stand-ins failed by name; the model was exported in full
    assert once.capture.trace_once_fallbacks == [("the model", "the export with stand-ins failed")]
    assert once == full


class _Embed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.proj(x))


class _DiTBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb, self.lin = _Embed(), nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * self.emb(t)


class _DiTLike(nn.Module):
    """diffusers' DiT calls its first block's embedding once more from the root, after the blocks: the traced
    embedding then has two calls (its leaves' nodes are named per call), which one call of a later block's does
    not have."""

    def __init__(self, again: str) -> None:
        super().__init__()
        self.inp = nn.Linear(8, 8)  # every block is called alike: the first one is traced for the others
        self.blocks = nn.ModuleList(_DiTBlock() for _ in range(3))
        self.again = again

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        for block in self.blocks:
            x = block(x, t)
        first = self.blocks[0].emb
        return x + (first(t) if self.again == "block" else first.proj(t))


@pytest.mark.parametrize("again", ["block", "leaf"])
def test_a_traced_member_called_again_is_not_stood_in_for(again: str, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    model = _DiTLike(again).eval()
    x, t = torch.randn(2, 8), torch.randn(2, 8)
    full = torch2ir.convert(model, (x, t), trace_once=False)
    made = _instances(monkeypatch)
    once = torch2ir.convert(model, (x, t))
    assert not [k for m in made for k in m if ".emb" in k]  # no embedding is an instance of the first block's
    assert [why for who, why in once.capture.trace_once_fallbacks if who == "the model"
            and why.startswith("traced 'blocks.0' (or 'blocks.0.emb") and "has calls besides" in why]
    _assert_full_trace(once, full, model, x, t)

"""The mechanism of ``torch2ir.frontend.transformers_experts`` on stand-in classes of this file (transformers itself
is covered by ``tests/real/test_transformers_experts.py``): a reviewed eager forward, held by its class or by a
dispatcher's ``original_forward`` cell as transformers' ``use_experts_implementation`` holds it, runs its traceable
form only in the converting thread while a conversion runs, and is put back after; another source runs as before."""

from __future__ import annotations

import functools
import threading

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from torch2ir.frontend import transformers_experts as te
from torch2ir.frontend.export import ExportFailedError

CALLS = {"original": 0}


def _traced(self, x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    for e in range(self.n):  # every expert in order; one with no row adds nothing
        rows = (index == e).nonzero().unbind(1)[0]
        out = out.index_add(0, rows, x[rows] * self.scale[e])
    return out


class Loop(nn.Module):
    """An eager loop over the experts hit, as transformers writes them."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 3
        self.scale = nn.Parameter(torch.tensor([1.5, -2.0, 0.25]))

    def forward(self, x, index):
        CALLS["original"] += 1
        out = torch.zeros_like(x)
        for e in torch.unique(index):
            rows = torch.where(index == e)[0]
            out.index_add_(0, rows, x[rows] * self.scale[int(e)])
        return out


def _dispatching(cls: type) -> type:
    """transformers' ``use_experts_implementation`` in short: the eager forward held in a closure cell."""
    original_forward = cls.forward
    others = {"double": lambda self, x, index: 2 * original_forward(self, x, index)}

    @functools.wraps(original_forward)
    def forward(self, *args, **kwargs):
        return others.get(self.implementation, original_forward)(self, *args, **kwargs)

    cls.forward = forward
    return cls


@_dispatching
class Dispatched(Loop):
    """The same eager loop (``Loop.forward``), held by the dispatcher."""

    implementation = "eager"


def _site(cls: type, held) -> te.Site:
    return te.Site(__name__, cls.__name__, frozenset({te.source_hash(held)}), _traced)


@pytest.fixture
def sites(monkeypatch):
    monkeypatch.setattr(te, "SITES", (_site(Loop, Loop.forward), _site(Dispatched, Dispatched.forward.__wrapped__)))
    return te.SITES


X, INDEX = torch.randn(6, 4), torch.tensor([0, 2, 2, 0, 2, 0])  # expert 1 gets no row


@pytest.mark.parametrize("cls", [Loop, Dispatched])
def test_a_reviewed_loop_converts_exactly_and_is_put_back(sites, cls: type) -> None:
    model = cls()
    held = te.reviewed(sites[0] if cls is Loop else sites[1])
    assert held is not None
    with pytest.raises(Exception, match="data-dependent"):
        torch.export.export(model, (X, INDEX), strict=False)
    ir = torch2ir.convert(model, (X, INDEX))
    rebuilt = ir2torch.convert(ir, model.state_dict())
    for index in (INDEX, torch.zeros(6, dtype=torch.long), torch.tensor([1, 0, 2, 1, 0, 2])):
        assert torch.equal(rebuilt(X, index), model(X, index))
    assert te.reviewed(sites[0] if cls is Loop else sites[1])[0] is held[0]  # the original is back


def test_the_dispatcher_still_chooses_and_another_thread_runs_the_original(sites) -> None:
    model = Dispatched()
    with te.traced_experts():
        model.implementation = "double"  # another implementation: not replaced, runs as before
        assert torch.equal(model(X, INDEX), 2 * _traced(model, X, INDEX))
        model.implementation = "eager"
        before = CALLS["original"]
        model(X, INDEX)
        assert CALLS["original"] == before  # the traceable form ran here
        thread = threading.Thread(target=model, args=(X, INDEX))
        thread.start()
        thread.join()
        assert CALLS["original"] == before + 1  # another thread runs the original
    model(X, INDEX)
    assert CALLS["original"] == before + 2


def test_another_source_is_not_replaced(monkeypatch) -> None:
    monkeypatch.setattr(te, "SITES", (te.Site(__name__, "Loop", frozenset({"0" * 64}), _traced),))
    assert te.reviewed(te.SITES[0]) is None
    original = Loop.forward
    with te.traced_experts():
        assert Loop.forward is original
    with pytest.raises(ExportFailedError, match="could not trace"):
        torch2ir.convert(Loop(), (X, INDEX))

"""Spies on a conversion that traces alike blocks once: the instances it made, the exports it ran; and a
model converted both ways."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torch2ir
from common.ir import IR
from torch2ir.hierarchy import build


def instances(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, str]]:
    """The ``{instance key: traced key}`` of every conversion from now on (an empty list: none stood in)."""
    made: list[dict[str, str]] = []
    original = build.instantiate

    def spy(*args: object, **kwargs: object) -> dict[str, str]:
        made.append(original(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(build, "instantiate", spy)
    return made


def exports(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The model of every ``torch.export`` a conversion runs from now on."""
    calls: list[object] = []
    original = build.export

    def spy(*args: object, **kwargs: object) -> object:
        calls.append(args[0])
        return original(*args, **kwargs)

    monkeypatch.setattr(build, "export", spy)
    return calls


def full_and_once(model: nn.Module, x: torch.Tensor, stood_in: bool,
                  monkeypatch: pytest.MonkeyPatch) -> tuple[IR, IR]:
    """``model`` converted in full and with ``trace_once=True``, checking whether blocks were stood in for, and that
    a group traced in full after all cost no second export (it failed, or read a watched attribute, before any
    stand-in was given for it)."""
    ran = exports(monkeypatch)
    full = torch2ir.convert(model, (x,), trace_once=False)
    full_exports = len(ran)
    made = instances(monkeypatch)
    once = torch2ir.convert(model, (x,), trace_once=True)
    assert any(made) is stood_in
    assert len(ran) - full_exports == full_exports
    return full, once


def assert_full_trace(once: IR, full: IR, model: nn.Module, *inputs: torch.Tensor) -> None:
    """``once``, every instance expanded, is the full trace ``full``, and its rebuild computes what ``model`` does,
    bit for bit."""
    import ir2torch

    for impl in once.values():
        _ = impl.graph
    assert once == full
    rebuilt = ir2torch.convert(once, model.state_dict()).eval()
    with torch.no_grad():
        assert torch.equal(rebuilt(*inputs), model(*inputs))

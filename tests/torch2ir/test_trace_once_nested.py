"""Alike blocks inside alike blocks: when a stack of layers cannot be traced once (a layer lifts a tensor constant,
reads its index, holds a ``torch.no_grad()`` region), the blocks alike inside its layers still are, in the same
export; and no stand-in is ever given inside a call being recorded for stand-ins."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torch2ir.trace_once.trace import alike_groups
from torch2ir.trace_once.watch import watching

pytest.importorskip("transformers")

from tests.torch2ir.test_trace_once_lower import _check_lowered
from tests.torch2ir.trace_once_spies import assert_full_trace, full_and_once, instances


class _Ffn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(8, 16), nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.nn.functional.gelu(self.up(x)))


class _ConstAttn(nn.Module):
    """Lifts a tensor constant (``torch.tensor`` in forward: DeBERTa's scale, Falcon's split, BEiT's index)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x) / torch.sqrt(torch.tensor(8.0))


class _IndexAttn(nn.Module):
    """Reads its layer index (a key/value cache would): no layer stands in for another."""

    def __init__(self, layer_idx: int) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.layer_idx = layer_idx

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.proj(x)
        return y * 2 if self.layer_idx == 1 else y


class _GradRegionAttn(nn.Module):
    """Holds a ``torch.no_grad()`` region (export makes it a higher-order op: PhiMoE's router)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            scale = x.abs().amax() + 1
        return self.proj(x) / scale


class _Layer(nn.Module):
    def __init__(self, attn: nn.Module) -> None:
        super().__init__()
        self.attn, self.ffn = attn, _Ffn()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(x)
        return x + self.ffn(x)


def _stack(make_attn: object, layers: int = 3) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 8), *[_Layer(make_attn(i)) for i in range(layers)]).eval()  # type: ignore


ATTENTIONS = {
    "constant": (lambda i: _ConstAttn(), "its traced call reads tensor constants export lifted"),
    "index": (lambda i: _IndexAttn(i), "its call reads {}layer_idx, which differs between the alike blocks"),
    "grad region": (lambda i: _GradRegionAttn(), "its traced call holds a higher-order op"),
}


@pytest.mark.parametrize("kind", list(ATTENTIONS))
def test_a_layer_traced_in_full_keeps_its_feed_forward_traced_once(kind: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    make_attn, why = ATTENTIONS[kind]
    model = _stack(make_attn)
    x = torch.randn(2, 8)
    made = instances(monkeypatch)
    full, once = full_and_once(model, x, True, monkeypatch)  # one export each
    # the layers and their attention run for real; the later layers' feed-forward blocks are instances
    assert sorted(made[-1]) == ["2.ffn", "2.ffn.down", "2.ffn.up", "3.ffn", "3.ffn.down", "3.ffn.up"]
    assert all(home.startswith("1.ffn") for home in made[-1].values())
    fallbacks = dict(once.capture.trace_once_fallbacks)
    assert fallbacks["_Layer"] == why.format("attn.")
    assert type(model[1].attn).__name__ in fallbacks  # the attention blocks alike inside the layers: in full too
    assert_full_trace(once, full, model, x)


@pytest.mark.parametrize("kind", list(ATTENTIONS))
def test_a_layer_traced_in_full_lowers_to_the_full_trace(kind: str) -> None:
    _check_lowered(_stack(ATTENTIONS[kind][0]), (torch.randn(2, 8),))


class _Macaron(nn.Module):
    """Two alike feed-forward blocks in one layer (Conformer's macaron halves)."""

    def __init__(self) -> None:
        super().__init__()
        self.ffn1, self.ffn2 = _Ffn(), _Ffn()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + 0.5 * self.ffn1(x)
        return x + 0.5 * self.ffn2(x)


def test_no_stand_in_is_given_inside_a_recorded_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first layer is recorded for the others to stand in for: its second half runs for real (a stand-in
    there would be repeated, unexpanded, in every layer standing in); the later layers are its instances."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), *[_Macaron() for _ in range(3)]).eval()
    groups = {tuple(g.paths) for g in alike_groups(model)}
    assert ("1.ffn1", "1.ffn2", "2.ffn1", "2.ffn2", "3.ffn1", "3.ffn2") in groups
    x = torch.randn(2, 8)
    made = instances(monkeypatch)
    full, once = full_and_once(model, x, True, monkeypatch)
    assert {k for k in made[-1] if k.count(".") == 0} == {"2", "3"}
    assert not [k for k in made[-1] if k.startswith("1.")]
    assert_full_trace(once, full, model, x)


class _Indexed(nn.Module):
    def __init__(self, index: int) -> None:
        super().__init__()
        self.index = index


def test_nested_watches_each_record_a_read() -> None:
    """A block recorded inside another's recorded call watches the same attribute: both see each read, and the
    outer watch still sees reads after the inner one ended."""
    outer_module, inner_module = _Indexed(0), _Indexed(1)
    with watching(outer_module, [("", "index")]) as outer:
        with watching(inner_module, [("", "index")]) as inner:
            assert inner_module.index == 1
        assert inner == ["index"] and outer == ["index"]
        assert outer_module.index == 0
        assert outer == ["index", "index"] and inner == ["index"]
    assert "index" not in vars(_Indexed)
    assert outer_module.index == 0 and outer == ["index", "index"]  # no longer watched

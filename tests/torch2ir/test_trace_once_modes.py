"""Tracing alike blocks once (the default) against tracing every block, beyond eval mode on fixed shapes:
symbolic dimensions, train mode, and a key/value cache. Either the IRs are equal once instances are expanded and
the rebuild is exact, or both conversions are refused the same way; never a silently merged block."""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim
from torch.utils import _pytree as pytree

import ir2torch
import torch2ir
from common.errors import ConversionError
from common.ir import IR

pytest.importorskip("transformers")

from tests.real.corpus import CORPUS
from tests.torch2ir.trace_once_spies import instances as _stood_in

ARCHES = {a.name: a for a in CORPUS}


def _expanded(ir: IR) -> IR:
    for impl in ir.values():
        _ = impl.graph
    return ir


def _exact(model: torch.nn.Module, rebuilt: torch.nn.Module, args: tuple, kwargs: dict) -> bool:
    with torch.no_grad():
        a, b = pytree.tree_leaves(model(*args, **kwargs)), pytree.tree_leaves(rebuilt(*args, **kwargs))
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def _four_layers(name: str) -> torch.nn.Module:
    import transformers

    torch.manual_seed(0)
    small = {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4, "num_hidden_layers": 4,
             "vocab_size": 50}
    if name == "llama":
        return transformers.LlamaModel(transformers.LlamaConfig(**small, num_key_value_heads=2, use_cache=False)).eval()
    return transformers.BertModel(transformers.BertConfig(**small)).eval()


@pytest.mark.parametrize("name", ["llama", "bert"])
def test_symbolic_dimensions(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Batch and sequence symbolic: the first layers see sizes not yet known equal (``s70``, ``s53``) and run;
    a later one called with the same symbols is stood in for, and every size still works."""
    model = _four_layers(name)
    ids, kwargs = torch.randint(0, 50, (2, 8)), {"attention_mask": torch.ones(2, 8, dtype=torch.long)}
    batch, seq = Dim("batch", min=1, max=8), Dim("seq", min=2, max=32)
    shapes = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
    full = torch2ir.convert(model, (ids,), kwargs, dynamic_shapes=shapes, trace_once=False)
    made = _stood_in(monkeypatch)
    once = torch2ir.convert(model, (ids,), kwargs, dynamic_shapes=shapes)
    assert made and made[-1], "no layer was stood in for"
    assert _expanded(once) == full
    flat = once.lower()
    rebuilt = ir2torch.convert(once, model.state_dict())
    for b, s in ((1, 5), (3, 17)):  # other sizes than the traced ones
        other = torch.randint(0, 50, (b, s))
        args, kw = (other,), {"attention_mask": torch.ones(b, s, dtype=torch.long)}
        assert _exact(model, rebuilt, args, kw)
        assert _exact(model, ir2torch.convert(flat, model), args, kw)


def test_train_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """BERT in train mode (dropout in every layer): the train-mode pass runs every stood-in layer for real."""
    arch = ARCHES["bert"]
    model = arch.build().train()
    args, kwargs = arch.inputs()
    full = torch2ir.convert(model, args, kwargs, trace_once=False)
    made = _stood_in(monkeypatch)
    once = torch2ir.convert(model, args, kwargs)
    assert made and made[-1]
    assert _expanded(once) == full
    rebuilt = ir2torch.convert(once, model.state_dict()).train()
    torch.manual_seed(3)
    expected = pytree.tree_leaves(model(*args, **kwargs))
    torch.manual_seed(3)
    got = pytree.tree_leaves(rebuilt(*args, **kwargs))
    assert all(torch.equal(x, y) for x, y in zip(expected, got, strict=True))


def test_a_key_value_cache_is_refused_alike() -> None:
    """A returned ``DynamicCache`` is refused whether blocks are traced once or each (same message)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(num_hidden_layers=3, hidden_size=32, intermediate_size=64, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=50)
    model = LlamaForCausalLM(config).eval()
    ids = torch.zeros(1, 8, dtype=torch.long)
    messages = []
    for trace_once in (False, True):
        with pytest.raises(ConversionError) as refused:
            torch2ir.convert(model, (ids,), {"use_cache": True}, trace_once=trace_once)
        messages.append(refused.value.message)
    assert messages[0] == messages[1] and "DynamicCache" in messages[0]

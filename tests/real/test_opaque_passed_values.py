"""transformers' Longformer, LED and Mimi with ``opaque="auto"`` (issue 49): only the module whose own forward
cannot be traced stays opaque, not the layers it calls.

- Longformer's and LED's encoders compute ``is_global_attn = is_index_global_attn.flatten().any().item()``, a
  Python bool read from the global attention mask, and pass it to each layer. The encoder is opaque; its layers get
  a plain ``True`` or ``False`` in the eager call and are traced on their own for that value (with global
  attention their self-attention, which indexes by the global tokens' positions, stays opaque inside them), their
  inputs guarded: a rebuild called with the other value raises ``InputMismatchError``.
- Mimi's transformer builds a causal mask only while exporting (``None`` in eager mode, where SDPA's ``is_causal``
  does it), so its attention, opaque for sizes read from data, would be called otherwise while traced: the
  transformer is opaque, and its layers, called with the eager call's ``None``, are traced on their own.

Before, every layer (and everything in it) was opaque: 76.2 % of Longformer's shrunk parameters, 64.8 % of Mimi's
encoder at its default dimensions (``benchmarks/results-sweep-opaque.md``).
"""

from __future__ import annotations

import pytest
import torch
from torch.utils import _pytree as pytree

import ir2torch
import torch2ir
from benchmarks.sweep_registries import build
from common.errors import InputMismatchError
from common.opaque import named_classes, traced_alone


def _outputs(module: torch.nn.Module, kwargs: dict) -> list[torch.Tensor]:
    with torch.no_grad():
        return [t for t in pytree.tree_leaves(module(**kwargs)) if isinstance(t, torch.Tensor)]


def _exact(model: torch.nn.Module, rebuilt: torch.nn.Module, kwargs: dict) -> bool:
    expected, got = _outputs(model, kwargs), _outputs(rebuilt, kwargs)
    return len(expected) == len(got) and all(torch.equal(a, b) for a, b in zip(expected, got, strict=True))


def _rebuilt(model: torch.nn.Module, ir: torch2ir.IR) -> torch.nn.Module:
    allow = sorted({cls for _, cls, _ in ir.capture.opaque} | set(named_classes(ir.values())))
    return ir2torch.convert(ir, model.state_dict(), allow=allow)


@pytest.mark.parametrize(("name", "layers", "attention"), [
    ("longformer", "encoder.layer", "attention.self"),
    ("led", "encoder.layers", "self_attn.longformer_self_attn"),
])
def test_longformer_encoders_layers_are_traced_for_the_flag_they_get(name: str, layers: str, attention: str) -> None:
    torch.manual_seed(0)
    model, _, kwargs = build("transformers", name, 64)
    model.eval()
    ids = kwargs["input_ids"]
    tokens = torch.zeros_like(ids)
    tokens[:, 0] = 1
    local = dict(kwargs, global_attention_mask=torch.zeros_like(ids))
    global_ = dict(kwargs, global_attention_mask=tokens)
    for seen, other, opaque in ((local, global_, []), (global_, local, [f"{layers}.0.{attention}",
                                                                          f"{layers}.1.{attention}"])):
        ir = torch2ir.convert(model, (), seen, opaque="auto")
        assert [path for path, _, _ in ir.capture.opaque] == ["encoder", *opaque]
        assert "value computed from tensor data" in ir.capture.opaque[0][2]
        assert {f"{layers}.0", f"{layers}.1"} <= set(traced_alone(ir))
        rebuilt = _rebuilt(model, ir)
        assert _exact(model, rebuilt, seen)
        with pytest.raises(InputMismatchError, match="is_global_attn"):  # the layers were traced for one value
            _outputs(rebuilt, other)
        assert torch2ir.convert(rebuilt, (), seen, opaque="auto") == ir


def test_mimi_encoders_transformer_layers_are_traced_on_their_own() -> None:
    torch.manual_seed(0)
    model, _, kwargs = build("transformers", "mimi_encoder", 64)
    model.eval()
    ir = torch2ir.convert(model, (), kwargs, opaque="auto")
    assert [path for path, _, _ in ir.capture.opaque] == ["encoder_transformer"]
    assert "otherwise while traced" in ir.capture.opaque[0][2]
    assert {"encoder_transformer.layers.0", "encoder_transformer.layers.1"} <= set(traced_alone(ir))
    assert ir["encoder_transformer.layers.0.self_attn"].type == "module"
    rebuilt = _rebuilt(model, ir)
    assert _exact(model, rebuilt, kwargs)
    # converting the rebuild gives the same IR, the SEANet convolutions' padding computed from sizes read from data
    # too (tests/loop/test_sizes_from_data.py)
    again = torch2ir.convert(rebuilt, (), kwargs, opaque="auto")
    assert [entry[:2] for entry in again.capture.opaque] == [entry[:2] for entry in ir.capture.opaque]
    assert again == ir

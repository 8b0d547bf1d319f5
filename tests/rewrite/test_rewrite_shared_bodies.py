"""A rewrite of a saved IR whose alike blocks share one stored body applies to every instance, and ``where=``
splits the instances it selects off (copy on write): saved again, the untouched instances still share one body
and the rewritten ones share another. Outputs stay exact (a 4-layer transformers Llama, random weights)."""

from __future__ import annotations

import pytest
import torch

import ir2torch
import torch2ir
from common.ir import IR
from common.rewrite import fuse_qkv
from common.textview import shared_groups


@pytest.fixture(scope="module")
def llama():
    from transformers import LlamaConfig, LlamaModel

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, use_cache=False)
    model = LlamaModel(config).eval()
    ids = torch.randint(0, 64, (1, 6), generator=torch.Generator().manual_seed(0))
    return model, ids


def _saved_again(ir: IR, tmp_path, name: str) -> IR:
    ir.save(tmp_path / name)
    return IR.load(tmp_path / name)


@pytest.mark.parametrize(("where", "attention_groups"), [
    (None, [4]),  # every layer's attention rewritten: still one body for the four
    ("layers.2*", [3]),  # layer 2 split off (stored on its own): the three others keep theirs
])
def test_a_rewrite_applies_to_every_instance_and_where_splits_instances_off(llama, tmp_path, where,
                                                                               attention_groups):
    model, ids = llama
    loaded = _saved_again(torch2ir.convert(model, (ids,)), tmp_path, "llama.ir.json")
    attention = [len(v) for k, v in shared_groups(loaded).items() if k.endswith("self_attn")]
    assert attention == [4]
    result = fuse_qkv(loaded, model.state_dict(), where=where)
    assert result.count == (4 if where is None else 1)
    again = _saved_again(result.ir, tmp_path, "fused.ir.json")
    groups = shared_groups(again)
    assert [len(v) for k, v in groups.items() if k.endswith("self_attn")] == attention_groups
    assert ("layers.2.self_attn" in {k for keys in groups.values() for k in keys}) == (where is None)
    fused = {k for k in again if k.endswith("qkv_proj")}
    assert fused == ({f"layers.{i}.self_attn.qkv_proj" for i in range(4)} if where is None
                     else {"layers.2.self_attn.qkv_proj"})
    assert len(groups["layers.0"]) == 4  # the decoder layers' own graphs did not change
    rebuilt = ir2torch.convert(again, result.state)
    assert torch.equal(rebuilt(ids).last_hidden_state, model(ids).last_hidden_state)

"""fuse_qkv on BERT and Llama (grouped-query attention) from transformers configs: one Linear per block,
outputs within 1e-5, strict loading, provenance, JSON round trip."""

from __future__ import annotations

import pytest
import torch

import ir2torch
import torch2ir
from common.errors import StateDictError
from common.ir import IR
from common.rewrite import fuse_qkv
from common.verify import verify
from tests.rewrite.helpers import corpus_model

CASES = {"bert": ("encoder.layer.{}.attention.self", "qkv", ("query", "key", "value"), [64, 64, 64]),
         "llama": ("model.layers.{}.self_attn", "qkv_proj", ("q_proj", "k_proj", "v_proj"), [64, 32, 32])}


@pytest.mark.parametrize("name", sorted(CASES))
def test_fuse_qkv(name, tmp_path):
    block, fused, parts, sizes = CASES[name]
    model, args, kwargs, ir = corpus_model(name)
    result = fuse_qkv(ir, model.state_dict())
    new_ir, new_state = result
    assert result.count == 2 and result.skipped == []
    for layer in range(2):
        key = f"{block.format(layer)}.{fused}"
        impl = new_ir[key]
        assert impl.type == "linear" and impl.data["out_features"] == sum(sizes)
        assert all(f"{block.format(layer)}.{p}" not in new_ir for p in parts)
        want = torch.cat([model.get_submodule(f"{block.format(layer)}.{p}").weight for p in parts])
        assert torch.equal(new_state[f"{key}.weight"], want)
        assert [f["key"].rpartition(".")[2] for f in impl.meta["provenance"][0]["from"]] == list(parts)
    rebuilt = ir2torch.convert(new_ir, new_state)
    # the fused call carries its shape and dtype, as a conversion of the rebuild records them
    again = torch2ir.convert(rebuilt, args, kwargs)
    for layer in range(2):
        key, owner = f"{block.format(layer)}.{fused}", block.format(layer)
        (meta,) = [a["meta"] for _, a in new_ir[owner].graph.nodes(data=True) if a.get("implementation") == key]
        assert meta["shape"][-1] == sum(sizes) and meta["dtype"] == torch.float32
        assert [a["meta"] for _, a in again[owner].graph.nodes(data=True) if a.get("implementation") == key] == [meta]
    report = verify(model, rebuilt, args, kwargs, atol=1e-5, rtol=0, rewritten=new_ir)
    assert report.ok and report.max_abs_diff < 1e-5 and report.first_divergence is None, report
    new_ir.save(tmp_path / "fused.ir.json")
    assert IR.load(tmp_path / "fused.ir.json") == new_ir
    with pytest.raises(StateDictError, match="modules a rewrite replaced"):
        ir2torch.convert(new_ir, model.state_dict())


def test_fuse_qkv_where_selects_blocks():
    model, _, _, ir = corpus_model("bert")
    result = fuse_qkv(ir, model.state_dict(), where="encoder.layer.1.*")
    assert [c.split(":")[0] for c in result.changes] == ["encoder.layer.1.attention.self.qkv"]
    assert "encoder.layer.0.attention.self.query" in result.ir

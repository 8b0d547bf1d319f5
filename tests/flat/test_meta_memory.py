"""Weight-free lowering: a Llama with Llama-2-7B dimensions on the ``meta`` device lowers in little memory.

Materialised, its ~6.7B float32 parameters would take ~27 GB. It is built under ``torch.device("meta")``
and lowered with meta input ids in a fresh interpreter, whose peak resident set size (``VmHWM``)
must stay under 1.5 GiB. Run with ``-s`` to see the measured figure (the time it takes is measured by
``benchmarks/run.py``'s ``scale`` scenario).
"""

from __future__ import annotations

import pytest

from tests.helpers import PEAK_KIB_SOURCE, run_python

LIMIT_KIB = 1536 * 1024  # 1.5 GiB; VmHWM is in KiB

CODE = """
import json
import torch
from transformers import LlamaConfig, LlamaForCausalLM
import torch2ir

config = LlamaConfig(num_hidden_layers=32, hidden_size=4096, intermediate_size=11008, num_attention_heads=32,
                     num_key_value_heads=32, vocab_size=32000, use_cache=False)
with torch.device("meta"):
    model = LlamaForCausalLM(config)
assert all(p.is_meta for p in model.parameters())
ids = torch.zeros(1, 16, dtype=torch.long, device="meta")
flat = torch2ir.lower(model, (ids,))
linears = [n for n in flat.nodes if n.op_type == "aten.linear.default"]
print(json.dumps({
    "maxrss_kib": peak_kib(),
    "params": sum(p.numel() for p in model.parameters()),
    "nodes": len(flat.nodes),
    "weights": len(flat.weights),
    "linears": len(linears),
    "first_linear": [linears[0].module_path, linears[0].inputs[1].shape],
    "logits": flat.graph_outputs[0].shape,
    "tensors": len(flat.tensors),
}))
"""


@pytest.mark.slow
def test_llama_7b_dimensions_lower_under_1_5_gib() -> None:
    report = run_python(PEAK_KIB_SOURCE + CODE, timeout=300)
    rss = report["maxrss_kib"]
    print(f"\nmeta Llama-2-7B dims ({report['params'] / 1e9:.2f}B params, {report['nodes']} nodes): "
          f"peak RSS {rss / 1024:.0f} MiB")
    assert report["params"] > 6_500_000_000  # ~27 GB of float32 weights, had they been allocated
    assert rss < LIMIT_KIB, f"peak RSS {rss} KiB >= {LIMIT_KIB} KiB"
    assert report["linears"] == 32 * 7 + 1  # q, k, v, o, gate, up, down per layer, and the LM head
    assert report["first_linear"] == ["model.layers.0.self_attn.q_proj", [4096, 4096]]
    assert report["logits"] == [1, 16, 32000]
    # 9 parameters per layer, embedding, final norm, LM head, rotary inv_freq (unused buffers are left out)
    assert report["weights"] == 32 * 9 + 3 + 1 and report["tensors"] == 0

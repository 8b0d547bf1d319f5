"""Weight-free conversion: a ~1.3B-parameter Llama built on the ``meta`` device converts in little memory.

The model (24 layers, hidden size 2048) would take ~5 GB of float32 weights if it were
materialised. It is built under ``torch.device("meta")`` and converted with meta input ids
in a fresh interpreter, whose peak resident set size (``VmHWM``) must stay under 2 GiB.
Run with ``-s`` to see the measured figure (the time it takes is measured by ``benchmarks/run.py``'s
``scale`` scenario).
"""

from __future__ import annotations

import pytest

from tests.helpers import PEAK_KIB_SOURCE, run_python

LAYERS = 24
LIMIT_KIB = 2 * 1024 * 1024  # 2 GiB; VmHWM is in KiB

CODE = f"""
import json
import torch
from transformers import LlamaConfig, LlamaModel
import torch2ir

config = LlamaConfig(num_hidden_layers={LAYERS}, hidden_size=2048, intermediate_size=5504, num_attention_heads=16,
                     num_key_value_heads=16, vocab_size=32000, use_cache=False)
with torch.device("meta"):
    model = LlamaModel(config)
params = sum(p.numel() for p in model.parameters())
assert all(p.is_meta for p in model.parameters())
ids = torch.zeros(1, 16, dtype=torch.long, device="meta")
ir = torch2ir.convert(model, (ids,))
classes = {{key: impl.meta["class"].rpartition(".")[2] for key, impl in ir.items()}}
print(json.dumps({{
    "maxrss_kib": peak_kib(),
    "params": params,
    "decoder_layers": [k for k, c in classes.items() if c == "LlamaDecoderLayer"],
    "layer_calls": [ir.root.node(n).get("implementation") for n in ir.root.nodes],
    "layers_type": ir["layers"].type,
}}))
"""


@pytest.mark.slow
def test_meta_llama_converts_under_two_gib() -> None:
    report = run_python(PEAK_KIB_SOURCE + CODE, timeout=180)
    rss = report["maxrss_kib"]
    print(f"\nmeta Llama ({report['params'] / 1e9:.2f}B params, {LAYERS} layers): peak RSS {rss / 1024:.0f} MiB")
    assert report["params"] > 1_000_000_000  # the weights, had they been allocated, would exceed the limit
    assert rss < LIMIT_KIB, f"peak RSS {rss} KiB >= {LIMIT_KIB} KiB"
    assert report["decoder_layers"] == [f"layers.{i}" for i in range(LAYERS)]
    assert report["layers_type"] == "modulelist"
    assert [c for c in report["layer_calls"] if c and c.startswith("layers.")] == [f"layers.{i}" for i in range(LAYERS)]

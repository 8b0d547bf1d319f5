"""A frontier mixture-of-experts model on ``meta``: DeepSeek-V3's dimensions (61 layers, 256 routed experts of
which 8 per token, one shared expert, the first 3 layers dense, multi-head latent attention), built from
transformers' ``DeepseekV3Config`` with no weight allocated, converted with no ``allow=`` (its experts call
transformers' ``grouped_mm_fallback``, a known operator).

    python -m benchmarks.moe_frontier [rounds] [layers]      # default: 3 rounds, 61 layers

Interleaved per round: one ``torch.export.export`` of the model (non-strict, as torch2ir runs it) and
``torch2ir.convert``; then, once: the IR file's size, ``IR.load`` and ``ir2torch.convert(..., device="meta")``.
Prints one line per run and a table of medians (seconds, bytes) with convert/export as a ratio, and writes the
table to ``benchmarks/results-moe-frontier.md`` (docs/performance.md copies it).
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import results_file

#: DeepSeek-V3's published configuration (671 B parameters), the fields that set the graph and the shapes.
DEEPSEEK_V3 = {
    "vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
    "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128, "n_shared_experts": 1,
    "n_routed_experts": 256, "routed_scaling_factor": 2.5, "kv_lora_rank": 512, "q_lora_rank": 1536,
    "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128, "n_group": 8, "topk_group": 4,
    "num_experts_per_tok": 8, "first_k_dense_replace": 3, "norm_topk_prob": True, "max_position_embeddings": 4096,
}
SEQ = 16


def deepseek_v3(layers: int = 61) -> Any:
    """``DeepseekV3ForCausalLM`` with DeepSeek-V3's dimensions (``layers`` deep) on ``meta``, eval mode."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    config = DeepseekV3Config(**{**DEEPSEEK_V3, "num_hidden_layers": layers}, use_cache=False)
    with torch.device("meta"):
        return DeepseekV3ForCausalLM(config).eval()


def main(rounds: int = 3, layers: int = 61,
         output: str = str(results_file.BENCH / "results-moe-frontier.md")) -> None:
    """Measure, print the table and write it to ``output`` (``-``: print only)."""
    load = os.getloadavg()[0]
    import ir2torch
    import torch2ir
    from common import IR

    model = deepseek_v3(layers)
    params = sum(p.numel() for p in model.parameters())
    args = (torch.zeros((1, SEQ), dtype=torch.long, device="meta"),)
    times: dict[str, list[float]] = {}
    ir = None
    for _ in range(rounds):
        for label in ("export", "convert"):
            gc.collect()
            start = time.perf_counter()
            if label == "export":
                torch.export.export(model, args, strict=False)
            else:
                ir = torch2ir.convert(model, args)
            times.setdefault(label, []).append(time.perf_counter() - start)
            print(label, round(times[label][-1], 2), flush=True)
    assert ir is not None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "deepseek_v3.ir.json"
        ir.save(path)
        size = path.stat().st_size
        loads, rebuilds = [], []
        for _ in range(rounds):
            gc.collect()
            start = time.perf_counter()
            loaded = IR.load(path)
            loads.append(time.perf_counter() - start)
            gc.collect()
            start = time.perf_counter()
            rebuilt = ir2torch.convert(loaded, device="meta")
            rebuilds.append(time.perf_counter() - start)
    same = [k for k, _ in rebuilt.named_parameters()] == [k for k, _ in model.named_parameters()]
    e, c = statistics.median(times["export"]), statistics.median(times["convert"])
    body = "\n".join([
        f"DeepSeek-V3 dimensions, {layers} layers, {params / 1e9:.0f} B parameters on meta, input 1x{SEQ}; medians of "
        f"{rounds}, export and convert interleaved.", "",
        "| export | convert | convert/export | IR file | `IR.load` | rebuild on meta | same parameter paths |",
        "|---|---|---|---|---|---|---|",
        f"| {e:.2f} s | {c:.2f} s | {c / e:.2f}x | {size / 1e6:.2f} MB | {statistics.median(loads):.3f} s | "
        f"{statistics.median(rebuilds):.3f} s | {'yes' if same else 'no'} |"])
    results_file.write(output, "A frontier mixture-of-experts model: DeepSeek-V3 dimensions on meta (issue 49)",
                       [str(rounds), str(layers)], load, body)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))

"""A module called twice whose forward converts its own buffer with a no-op ``.to()``: each call reads it itself.

transformers 5.24's DeepSeek-V4 indexer calls its rotary embedding twice (the compressed windows' positions, then
``position_ids``); the embedding does ``inv_freq.to(device=x.device, dtype=torch.float)``, which returns the
buffer itself. Export then names the buffer after the first call's ``to`` node in the second call, so the second
call read a value of the first. It is the buffer: each call's graph reads it with its own ``get_attr``, outputs
exact, the loop a fixpoint.
"""

from __future__ import annotations

import torch
from torch import nn

import torch2ir
from common.testing import assert_roundtrip


class _Rope(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.compress_inv_freq = nn.Buffer(torch.rand(4), persistent=False)

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor, layer_type: str | None = None):
        inv_freq = getattr(self, f"{layer_type}_inv_freq")
        freqs = position_ids[..., None].float() * inv_freq.to(device=x.device, dtype=torch.float)
        return freqs.cos().to(dtype=x.dtype), freqs.sin().to(dtype=x.dtype)


class _Indexer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.kv_proj = nn.Linear(4, 4)
        self.rotary_emb = _Rope()

    def forward(self, hidden_states: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        compressed = self.kv_proj(hidden_states)[:, :2]
        positions = torch.arange(2).unsqueeze(0) * 2
        cos, sin = self.rotary_emb(compressed, position_ids=positions, layer_type="compress")
        compressed = compressed * cos + sin
        cos_q, sin_q = self.rotary_emb(hidden_states, position_ids=position_ids, layer_type="compress")
        return hidden_states * cos_q + sin_q + compressed.sum()


class _Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.indexer = _Indexer()

    def forward(self, hidden_states: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        return self.indexer(hidden_states, position_ids)


def test_a_buffer_converted_by_a_no_op_to_in_two_calls_is_read_by_each_call() -> None:
    torch.manual_seed(0)
    model = _Model().eval()
    args = (torch.randn(1, 3, 4), torch.arange(3).unsqueeze(0))
    ir, rebuilt, report = assert_roundtrip(model, args, {})
    assert report.max_abs_diff == 0.0, report
    rope = ir["indexer.rotary_emb"]
    graphs = list(rope.graphs())
    assert len(graphs) == 2  # the calls differ in shape: a graph each
    for graph in graphs:  # each reads the buffer itself
        reads = [a["implementation"] for _, a in graph.graph.nodes(data=True) if a["type"] == "get_attr"]
        assert reads == ["compress_inv_freq"]
    assert torch2ir.convert(rebuilt, args) == ir

"""A rebuilt model compiles as one graph: ``torch.compile(rebuilt, fullgraph=True)`` traces every op the generated
code calls (the overloads without a fast binding are called as ``OpOverload``\\ s, which dynamo knows; their boxed
entry was a graph break each) and computes what the rebuilt model does."""

from __future__ import annotations

import torch
from torch import nn

import ir2torch
import torch2ir


class Ops(nn.Module):
    """Ops outside the fast bindings (gather, index, slice with a step, a dtype conversion) around a Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        g = torch.gather(y, 1, idx)
        z = y[idx[:, 0]][:, ::2].to(torch.float64)
        return g.sum(1, keepdim=True) + z.float().mean(1, keepdim=True)


def test_fullgraph_compile_of_a_rebuilt_model_matches():
    torch.manual_seed(0)
    model = Ops().eval()
    x, idx = torch.randn(4, 8), torch.randint(0, 4, (4, 3))
    rebuilt = ir2torch.convert(torch2ir.convert(model, (x, idx)), model.state_dict())
    torch._dynamo.reset()
    explained = torch._dynamo.explain(rebuilt)(x, idx)
    assert explained.graph_break_count == 0, [str(b.reason)[:200] for b in explained.break_reasons]
    compiled = torch.compile(rebuilt, backend="aot_eager", fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, idx), rebuilt(x, idx), rtol=0, atol=1e-6)
        torch.testing.assert_close(compiled(x, idx), model(x, idx), rtol=0, atol=1e-6)

"""replace_pattern whatever the sizes: one call replaces a LayerNorm written as ops at 16 and at 32 channels (its
weight and bias pattern arguments, the replacement's normalized shape read from its argument), the rebuild
computing what the original model computes."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import ir2torch
import torch2ir
from common.rewrite import replace_pattern


class OpsNorm(nn.Module):
    """A LayerNorm as a hardware team's model writes it: in ops, with its own weight and bias."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.randn(c)), nn.Parameter(torch.randn(c))

    def forward(self, x):
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + 1e-5) * self.weight + self.bias


class Two(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.n16, self.b, self.n32 = nn.Linear(8, 16), OpsNorm(16), nn.Linear(16, 32), OpsNorm(32)

    def forward(self, x):
        return self.n32(self.b(self.n16(self.a(x))))


def pattern(x, weight, bias):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + 1e-5) * weight + bias


def replacement(x, weight, bias):
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps=1e-5)


def test_one_call_replaces_a_pattern_at_every_width():
    torch.manual_seed(0)
    model, x = Two().eval(), torch.randn(3, 5, 8)
    ir = torch2ir.convert(model, (x,))
    examples = (torch.randn(2, 4), torch.randn(4), torch.randn(4))  # a third width: only the ops matter
    result = replace_pattern(ir, model.state_dict(), pattern, replacement, example_inputs=examples)
    assert result.count == 2, result.changes
    for key, width in (("n16", 16), ("n32", 32)):
        (norm,) = [a for _, a in result.ir[key].graph.nodes(data=True)
                   if a.get("implementation") == "aten.layer_norm.default"]
        assert norm["args"][1] == [width] and norm["meta"]["shape"] == [3, 5, width]
        assert norm["meta"]["dtype"] == torch.float32
    rebuilt = ir2torch.convert(*result)
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(x), model(x), rtol=1e-5, atol=1e-5)
    assert torch2ir.convert(rebuilt, (x,)) == result.ir

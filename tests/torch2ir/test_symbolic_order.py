"""Runtime assertions on data-dependent sizes convert to one order (torch2ir.hierarchy.symbolic_order): a rebuilt model
converts back to the same IR although export places the assertions in the order it learned them.

The model is diffusers' ``Lumina2RotaryPosEmbed`` in miniature: lengths read from a mask (``tolist()``), a tensor
of ``length + 4`` rows (export learns ``0 <= u0 + 4``), an arange of ``length`` (``0 <= u0``) and a slice copied
into a fixed-size buffer (``Eq(u0, Min(5, u0))``). Rebuilt, it checks ``0 <= u0`` first, so export finds
``0 <= u0 + 4`` implied and keeps that check where the rebuilt code has it: before, the second conversion held the
same nodes in another order.
"""

from __future__ import annotations

import torch
from torch import nn

import ir2torch
import torch2ir
from torch2ir.hierarchy.symbolic_order import ASSERT_NAME


class Lengths(nn.Module):
    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
        lengths = mask.sum(dim=1).tolist()
        total = [n + 4 for n in lengths]
        ids = torch.zeros(1, max(total), 2, dtype=torch.int32)
        for i, (n, t) in enumerate(zip(lengths, total)):
            ids[i, :n, 0] = torch.arange(n, dtype=torch.int32)
            ids[i, n:t, 1] = n
        freqs = x[:, : ids.shape[1]] * ids[..., :1].float()
        head = torch.zeros(1, mask.shape[1], x.shape[-1])
        for i, n in enumerate(lengths):
            head[i, :n] = freqs[i, :n]
        return head, ids, total


def _inputs(ones: int) -> tuple[torch.Tensor, torch.Tensor]:
    mask = torch.zeros(1, 5, dtype=torch.bool)
    mask[0, :ones] = True
    return torch.randn(1, 12, 3), mask


def test_assertions_convert_back_to_the_same_ir() -> None:
    model = Lengths().eval()
    args = _inputs(5)
    ir = torch2ir.convert(model, args)
    graph = ir["root"].graph
    nodes = [n for n, d in graph.nodes(data=True) if d.get("implementation") == "aten._assert_scalar.default"]
    assert len(nodes) >= 2 and all(n.startswith(ASSERT_NAME) for n in nodes)
    rebuilt = ir2torch.convert(ir, model.state_dict())
    for ones in (5, 3, 1):  # other lengths than the traced one run the same checks and values
        x, mask = _inputs(ones)
        got, want = rebuilt(x, mask), model(x, mask)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]) and list(got[2]) == want[2]
    again = torch2ir.convert(rebuilt, args)
    assert again == ir
    assert torch2ir.convert(ir2torch.convert(again, model.state_dict()), args) == ir


def test_the_order_does_not_depend_on_the_traced_order() -> None:
    """The run of symbolic nodes after ``item`` is canonical: bounds first, each assertion after its condition."""
    model = Lengths().eval()
    ir = torch2ir.convert(model, _inputs(5))
    order = list(ir["root"].graph.nodes)
    first = order.index(ASSERT_NAME)
    cond = ir["root"].graph.nodes[ASSERT_NAME]["args"][0].node
    assert order[first - 1] == cond and ir["root"].graph.nodes[cond]["meta"]["sym"].endswith(">= 0")

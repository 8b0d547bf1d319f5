"""An opaque leaf given a tensor whose size the trace computes from data (an unbacked symbol: Qwen3-VL's vision
attention gets ``cu_seqlens``, as long as the images' patch grid has entries): its traced call cannot be read
against the eager call's sizes, so the size is asserted (``torch._check``, a runtime assertion in the graph)
instead of keeping the caller opaque (which ``"auto"`` did up to the root). The rebuild is exact on data giving
the same size and raises on data giving another (torch2ir.opaque.same_call)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common.errors import IRError


class Gather(nn.Module):
    """Branches on data (export cannot trace it); uses the rows it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
        y = self.proj(x) if x.sum() > 0 else -x
        return y if rows is None else y + x[rows[:, 0]].sum(0)


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 4)
        self.gather = Gather()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = (x[:, :1] > 0).nonzero()  # as many rows as x has positive first entries: a size from data
        return self.gather(self.embed(x), rows)


X = torch.tensor([[1.0, 2, 3, 4], [-1, 2, 3, 4], [2, 1, 1, 1]])


def test_a_size_from_data_is_asserted_and_only_the_leaf_stays_opaque() -> None:
    torch.manual_seed(0)
    model = Model().eval()
    ir = torch2ir.convert(model, (X,), opaque="auto")
    assert [path for path, _, _ in ir.capture.opaque] == ["gather"]  # the root is traced
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=[f"{__name__}.Gather"])
    same_count = X[[2, 1, 0]]  # two positive first entries, in other rows
    for x in (X, same_count):
        with torch.no_grad():
            assert torch.equal(rebuilt(x), model(x))
    other_count = X.abs()  # three rows: the eager call's outputs do not stand for that call
    with torch.no_grad(), pytest.raises((IRError, RuntimeError), match="[Aa]ssert|opaque leaf"):
        rebuilt(other_count)


class OnlyTraced(nn.Module):
    """Passes the rows only while exported (as transformers' causal masks), None in eager mode."""

    def __init__(self) -> None:
        super().__init__()
        self.gather = Gather()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = (x[:, :1] > 0).nonzero() if torch.compiler.is_exporting() else None
        return self.gather(x, rows)


def test_a_size_from_data_in_a_call_that_differs_is_named_not_read() -> None:
    from torch2ir.frontend.export import OpaqueCallError

    shape = r"argument 1 is a int64 tensor of shape \['u\d+', 2\] while traced, None in eager mode"
    with pytest.raises(OpaqueCallError, match=shape):
        torch2ir.convert(OnlyTraced().eval(), (X,), opaque=[Gather])

"""A module whose trace fails only in its context (``torch2ir.opaque.driver``): a vision tower's attention splits
its input by ``cu_seqlens.tolist()``, which the tower computes from data with a size export cannot know; alone, on
the inputs of its eager call, it traces. ``opaque="auto"`` then keeps its caller (the block) opaque and traces the
attention on its own, its inputs guarded, rather than keeping the attention opaque. And a rebuilt graph holding
runtime assertions on sizes read from data converts back to the same IR (``ir2torch.codegen.deferred_asserts``)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common.errors import ExecutionError, InputMismatchError
from common.opaque import traced_alone


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, cu_seqlens: torch.Tensor) -> torch.Tensor:
        lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()
        parts = torch.split(self.proj(x), lengths, dim=0)
        return torch.cat([p.softmax(0) for p in parts])


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn, self.norm = Attention(), nn.LayerNorm(4)

    def forward(self, x: torch.Tensor, cu_seqlens: torch.Tensor) -> torch.Tensor:
        return x + self.attn(self.norm(x), cu_seqlens)


class Tower(nn.Module):
    """``cu_seqlens`` from the grid, as Qwen-VL's vision towers do: its size is read from data."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])

    def forward(self, x: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
        sizes = torch.repeat_interleave(grid[:, 1] * grid[:, 2], grid[:, 0])
        cu_seqlens = nn.functional.pad(sizes.cumsum(0), (1, 0))
        for block in self.blocks:
            x = block(x, cu_seqlens)
        return x


BLOCK = f"{__name__}.Block"
X, GRID = torch.randn(12, 4), torch.tensor([[1, 2, 2], [1, 2, 4]])


def test_a_module_failing_only_in_its_context_is_traced_on_its_own_below_its_opaque_caller() -> None:
    torch.manual_seed(0)
    model = Tower().eval()
    with pytest.raises(Exception, match="data-dependent"):  # whatever class torch.export raises
        torch.export.export(model, (X, GRID), strict=False)
    ir = torch2ir.convert(model, (X, GRID), opaque="auto")
    assert [(p, c) for p, c, _ in ir.capture.opaque] == [("blocks.0", BLOCK), ("blocks.1", BLOCK)]
    assert "blocks.0.attn" in traced_alone(ir) and ir["blocks.0.attn"].type == "module"
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=[BLOCK])
    with torch.no_grad():
        assert torch.equal(rebuilt(X, GRID), model(X, GRID))
        other = torch.tensor([[1, 1, 4], [1, 4, 2]])  # other lengths, as many: the attention's graph holds them
        assert torch.equal(rebuilt(X, other), model(X, other))
        frames = torch.tensor([[2, 1, 2], [1, 2, 4]])  # three lengths: the tower's graph asserts two
        with pytest.raises(ExecutionError, match="u0 <= 2"):
            rebuilt(X, frames)
        with pytest.raises(InputMismatchError, match="implementation 'blocks.0.attn', at cu_seqlens"):
            rebuilt.blocks[0](X, torch.tensor([0, 2, 4, 12]))  # the attention's own guard, naming it
    assert torch2ir.convert(rebuilt, (X, GRID), opaque="auto") == ir


def test_a_rebuilt_graph_with_runtime_assertions_converts_back_to_the_same_ir() -> None:
    """The attention alone, on one length: export asserts the split size's range after the ``item`` that reads it
    (``u0 >= 12``, ``Eq(u0, 12)``), learned from the split. Traced again in that order, the rebuild gave export the
    equality first, which replaced the size by 12 before the split used it (``split_with_sizes(x, [12])``), and
    export's own assertions came in beside the copies."""
    torch.manual_seed(0)
    model = Attention().eval()
    cu = torch.tensor([0, 12])  # one length: export asserts it equals 12
    ir = torch2ir.convert(model, (X, cu))
    asserts = [n for n in ir.root.nodes if ir.root.node(n).get("implementation") == "aten._assert_scalar.default"]
    assert asserts  # the sizes read from data are asserted in the graph
    rebuilt = ir2torch.convert(ir, model.state_dict())
    with torch.no_grad():
        assert torch.equal(rebuilt(X, cu), model(X, cu))
        with pytest.raises(RuntimeError):  # lengths that do not add up to 12: export's assertion stops them
            rebuilt(X, torch.tensor([0, 11]))
    assert torch2ir.convert(rebuilt, (X, cu)) == ir


class NormedTower(Tower):
    """A batch norm whose running statistics a train-mode eager call would update."""

    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
        return super().forward(self.bn(x), grid)


def test_finding_the_context_leaves_the_model_as_it_was() -> None:
    """The eager call that records the failing module's inputs runs on a copy in eval mode: a train-mode model's
    running statistics, its counters and the random state are the same after the conversion."""
    torch.manual_seed(0)
    model = NormedTower().train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    ir = torch2ir.convert(model, (X, GRID), opaque="auto")
    assert [(p, c) for p, c, _ in ir.capture.opaque] == [("blocks.0", BLOCK), ("blocks.1", BLOCK)]
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert torch.equal(torch.get_rng_state(), rng) and model.training

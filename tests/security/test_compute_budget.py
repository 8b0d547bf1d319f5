"""The compute budget (``max_flops``, :mod:`ir2torch.run_safety.flops`): a file whose graph would multiply far
more than its model's size warrants is refused at the call, on fake tensors, before any real op runs.

The hostile documents are real saved IRs and FlatIRs of small models whose size literal (``SIDE``, a number the
file holds once) is edited into a large one, as an attacker would: a kernel made in the graph, convolved with the
input, costs minutes of CPU for a few bytes of memory.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common import IR
from common.errors import ResourceBudgetError
from ir2torch.run_safety.flops import FLOPS_PER_PARAMETER, MIN_FLOPS, flop_limit, op_flops
from tests.helpers import RealKernels


class _Kernel(nn.Module):
    """Makes its convolution kernel in the graph: a few bytes in the file, any cost when run."""

    def __init__(self, side: int = 1024) -> None:
        super().__init__()
        self.side = side
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kernel = torch.ones(1, 1, self.side, self.side) / self.side
        return nn.functional.conv2d(x, kernel).mean() + self.lin(x[0, 0, :1, :4]).sum()


class _Product(nn.Module):
    """A matrix product of a tensor the graph expands from one value: no memory until the product."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = x[:, :1].expand(20000, 20000)
        return (a @ a).sum()


def _saved(tmp_path, model: nn.Module, args: tuple) -> IR:
    return IR.load(torch2ir.convert(model, args).save(tmp_path / "m.ir.json"))


def test_a_kernel_made_in_the_graph_is_refused_before_it_runs(tmp_path) -> None:
    x = torch.randn(1, 1, 2048, 2048)
    model = ir2torch.convert(_saved(tmp_path, _Kernel(), (x,)), _Kernel().state_dict())
    with RealKernels() as kernels, pytest.raises(
            ResourceBudgetError, match=r"aten.convolution.* TFLOP, more than the compute budget") as info:
        model(x)
    assert kernels.calls["convolution"] == 0  # counted on fake tensors: the 2.2 TFLOP convolution never ran
    assert not kernels.calls  # nor anything else: refused by the probe, before the call's first op
    assert info.value.implementation == "root" and "max_flops" in info.value.hint
    small, tiny = torch.randn(1, 1, 8, 8), _Kernel(side=3)  # the counter sees a convolution that does run
    rebuilt = ir2torch.convert(_saved(tmp_path, tiny, (small,)), tiny.state_dict())
    with RealKernels() as kernels:
        out = rebuilt(small)
    assert kernels.calls["convolution"] >= 1 and torch.equal(out, tiny(small))


def test_a_hostile_flat_ir_is_refused_alike(tmp_path) -> None:
    x = torch.randn(1, 1, 2048, 2048)
    path = torch2ir.lower(_Kernel(), (x,)).save(tmp_path / "m.flat.json")
    model = ir2torch.convert(path, _Kernel().state_dict())
    with RealKernels() as kernels, pytest.raises(ResourceBudgetError, match="compute budget"):
        model(x)
    assert kernels.calls["convolution"] == 0


def test_a_matrix_product_is_counted_in_a_checked_call_too(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A call the probe cannot tell (data-dependent sizes) runs checked, op by op: its FLOPs too."""
    from ir2torch.run_safety.forward_budget import ForwardBudget

    x = torch.randn(1, 4)
    model = ir2torch.convert(_saved(tmp_path, _Product(), (x,)))
    monkeypatch.setattr(ForwardBudget, "_probe", lambda *args, **kwargs: False)  # as when sizes depend on data
    with RealKernels() as kernels, pytest.raises(ResourceBudgetError, match=r"aten.mm.* TFLOP"):
        model(x)
    assert kernels.calls["mm"] == 0  # measured on fake tensors first: the 16 TFLOP product never ran
    assert kernels.calls["expand"] >= 1  # the ops before it did, one by one


def test_without_a_memory_limit_the_probe_still_counts_the_flops(tmp_path) -> None:
    """``max_bytes=None`` turns the memory check off, not the compute budget: the probe counts the FLOPs on fake
    tensors before anything runs (not a checked run op by op on every call)."""
    x = torch.randn(1, 4)
    model = ir2torch.convert(_saved(tmp_path, _Product(), (x,)), max_bytes=None)
    with RealKernels() as kernels, pytest.raises(ResourceBudgetError, match=r"aten.mm.* TFLOP"):
        model(x)
    assert sum(kernels.calls.values()) == 0  # refused by the probe: no real kernel ran, not even the expand


def test_the_budget_is_an_option_and_auto_follows_the_models_size() -> None:
    model = _Kernel(side=3)
    x = torch.randn(1, 1, 64, 64)
    ir = torch2ir.convert(model, (x,))
    assert flop_limit("auto", model) == MIN_FLOPS  # a small model: the floor
    big = nn.Linear(4096, 4096)
    assert flop_limit("auto", big) == FLOPS_PER_PARAMETER * (4096 * 4096 + 4096)
    assert flop_limit(10, model) == 10 and flop_limit(None, model) is None
    with pytest.raises(ValueError, match="max_flops"):
        flop_limit(-1, model)
    rebuilt = ir2torch.convert(ir, model.state_dict(), max_flops=10**4)  # 2 * 62 * 62 * 9 FLOPs needed
    with pytest.raises(ResourceBudgetError, match="compute budget of 10000 FLOP"):
        rebuilt(x)
    assert torch.equal(ir2torch.convert(ir, model.state_dict(), max_flops=None)(x), model(x))
    assert torch.equal(ir2torch.convert(ir, model.state_dict())(x), model(x))


def test_flop_formulas_match_the_definition() -> None:
    q, k, v = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 4)
    sdpa = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
    assert op_flops(sdpa, (q, k, v), {}, None) == 2 * 2 * 3 * 5 * 7 * (8 + 4)
    a, b = torch.randn(6, 9), torch.randn(9, 10)
    assert op_flops(torch.ops.aten.mm.default, (a, b), {}, a @ b) == 2 * 6 * 9 * 10
    assert op_flops(torch.ops.aten.add.Tensor, (a, a), {}, a + a) == 0

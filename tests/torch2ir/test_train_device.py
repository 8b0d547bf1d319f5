"""Where the eager train-mode passes run (:mod:`torch2ir.train.device`): CPU copies for a small CPU model whose
graph holds only ATen ops, meta otherwise; the work estimate read from the export's graph. What a pass records on
either device: ``test_train_device_records.py``."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

import torch2ir
from torch2ir.train import device as train_device


class _Work(nn.Module):
    """Every op family whose multiply-adds the estimate counts: linear, matmul, einsum, convolutions, attention."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 16)
        self.conv = nn.Conv2d(4, 6, 3, stride=2, groups=2)
        self.up = nn.ConvTranspose2d(6, 4, 3, stride=2)

    def forward(self, x: torch.Tensor, image: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = self.lin(x)
        return (h @ h.transpose(-1, -2), self.up(self.conv(image)), F.scaled_dot_product_attention(q, q, q),
                torch.einsum("bij,bjk->bik", x, x.transpose(1, 2)))


def _work_args() -> tuple[torch.Tensor, ...]:
    return torch.randn(2, 5, 8), torch.randn(1, 4, 9, 9), torch.randn(2, 3, 7, 4)


def test_graph_work_counts_the_flops_pytorchs_flop_counter_counts() -> None:
    model, args = _Work(), _work_args()
    flops, elements, ops = train_device.graph_work(torch.export.export(model, args).graph)
    with FlopCounterMode(display=False) as counter, sdpa_kernel(SDPBackend.MATH):  # attention as two matmuls
        outputs = model(*args)
    assert flops == counter.get_total_flops()
    assert ops == 8  # linear, two transposes, matmul, two convolutions, attention, einsum
    assert elements >= sum(t.numel() for t in outputs)


class _Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(self.lin(x).relu(), 0.1, self.training)


class _Wide(nn.Module):
    """Few ops, much arithmetic: a pass on meta is cheaper."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(64, 64, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(self.conv(x), 0.1, self.training)


def _device(model: nn.Module, args: tuple, **export_options) -> str:
    ep = torch.export.export(model, args, **export_options)
    return train_device.pass_device(model, args, None, ep.graph)


def test_a_small_cpu_model_runs_its_passes_on_cpu() -> None:
    assert _device(_Tiny(), (torch.randn(2, 8),)) == "cpu"


def test_much_arithmetic_few_ops_runs_on_meta() -> None:
    assert _device(_Wide(), (torch.randn(1, 64, 128, 128),)) == "meta"


def test_a_model_on_meta_runs_on_meta() -> None:
    assert _device(_Tiny().to("meta"), (torch.randn(2, 8, device="meta"),)) == "meta"


def test_large_state_runs_on_meta(monkeypatch) -> None:
    monkeypatch.setattr(train_device, "MAX_BYTES", 100)  # the copies would exceed it
    assert _device(_Tiny(), (torch.randn(2, 8),)) == "meta"


def test_symbolic_sizes_run_on_meta() -> None:
    batch = torch.export.Dim("batch", min=2)
    assert _device(_Tiny(), (torch.randn(2, 8),), dynamic_shapes=({0: batch},)) == "meta"


@pytest.mark.parametrize("kind", ["sparse", "quantized"])
def test_a_tensor_that_is_not_plain_and_strided_runs_on_meta(kind: str) -> None:
    model = _Tiny()
    args = (torch.randn(2, 8),)
    graph = torch.export.export(model, args).graph
    special = torch.eye(8).to_sparse() if kind == "sparse" else torch.quantize_per_tensor(
        torch.randn(8), 0.1, 0, torch.qint8)
    model.register_buffer("special", special)
    assert train_device.pass_device(model, args, None, graph) == "meta"


class _NoGradRegion(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            scale = (x @ x.transpose(-1, -2)).mean()
        return F.dropout(self.lin(x) * scale, 0.1, self.training)


def test_the_work_inside_a_higher_order_op_is_counted() -> None:
    model, args = _NoGradRegion(), (torch.randn(2, 5, 8),)
    ep = torch.export.export(model, args)
    assert any(isinstance(n.target, torch._ops.HigherOrderOperator) for n in ep.graph.nodes)
    flops, _, _ = train_device.graph_work(ep.graph)
    with FlopCounterMode(display=False) as counter:
        model(*args)
    assert flops == counter.get_total_flops()  # the region's matmul and the linear
    assert train_device.pass_device(model, args, None, ep.graph) == "cpu"


def test_a_custom_op_runs_on_meta() -> None:
    calls: list[int] = []

    @torch.library.custom_op("torch2ir_test::counted", mutates_args=())
    def counted(x: torch.Tensor) -> torch.Tensor:
        calls.append(1)  # a CPU kernel may do anything beside computing
        return x.clone()

    @counted.register_fake
    def _(x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)

    class Custom(_Tiny):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return counted(super().forward(x))

    model, args = Custom(), (torch.randn(2, 8),)
    ep = torch.export.export(model, args)
    assert train_device.graph_work(ep.graph) is None
    assert train_device.pass_device(model, args, None, ep.graph) == "meta"
    calls.clear()
    torch2ir.convert(model, args, allow=["torch2ir_test::counted"])
    assert calls == [], "the conversion's train-mode pass ran the op's meta kernel, never its CPU one"

"""Sizes read from data (unbacked symbols) give back the same IR when the rebuild is converted (issue 49's loop
closure), on small models with the patterns of transformers' Mimi and HunyuanVL (the real models:
``tests/real/test_opaque_passed_values.py``, ``tests/loop/test_runtime_assertions.py``):

- SEANet's convolutions pad by amounts computed from their input's length and read with ``.item()``. A layer called
  with data-flow arguments (it reads those sizes from outside) reads its input's length with ``sym_size`` where
  export had reused the sum its caller computed: the rebuild, whose module is such a call, reads it again from the
  tensor it gets, not as one more input (:mod:`torch2ir.hierarchy.local_sizes`).
- An equation export states the other way round from the node that computes it (``Eq(2, u2 + u3)``, the node's
  ``Eq(u2 + u3, 2)``) is stated as the node computes it (:func:`torch2ir.hierarchy.graphs.assert_message`).
- Upsampling layers read the products of those sizes their first convolution computed, which it returns in its
  graph's order, not in export's (:func:`torch2ir.hierarchy.symbolic_order.canonical_positions`).
- A vision tower reads ``t, h, w`` with ``tolist()`` and uses ``h, w`` only: the symbols are numbered without
  export's gap (:mod:`torch2ir.hierarchy.unbacked_names`), and the merger's ``torch._check(h > 1)``, which a graph
  only asserts where ``h`` is read, is given to export before the convolution whose check it implies
  (:mod:`common.deferred_checks`).
- HY-V4-VL's merger reshapes to ``(-1, h, w, c)``: export learns ``Eq(Mod(64, 4*u0*u1), 0)`` from torch's view
  check, and the rebuild, computing that condition with Python's ``%`` (``PythonMod``), no longer gives it again
  as a new assertion (the same number where the divisor is positive).
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import ir2torch
import torch2ir


class PadConv(nn.Module):
    """Mimi's ``MimiConv1d``: padding computed from the length with tensors of its buffers."""

    def __init__(self, cin: int, cout: int, k: int, stride: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, k, stride)
        self.register_buffer("step", torch.tensor(stride), persistent=False)
        self.register_buffer("kernel", torch.tensor(k), persistent=False)
        self.register_buffer("total", torch.tensor(k - stride), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = x.shape[-1]
        frames = torch.ceil((length - self.kernel + self.total) / self.step + 1).to(torch.int64) - 1
        extra = frames * self.step + self.kernel - self.total - length
        return self.conv(F.pad(x, (self.total, extra)))


class Block(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.block = nn.ModuleList([nn.ELU(), PadConv(c, c // 2, 3), nn.ELU(), PadConv(c // 2, c, 1)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x
        for layer in self.block:
            y = layer(y)
        return x + y


class Up(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose1d(cin, cout, 2 * stride, stride)
        self.right = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        return x[..., : x.shape[-1] - self.right]


class Stack(nn.Module):
    def __init__(self, *layers: nn.Module) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def encoder() -> nn.Module:
    return Stack(PadConv(1, 4, 7), Block(4), nn.ELU(), PadConv(4, 8, 4, 2))


def decoder() -> nn.Module:
    return Stack(PadConv(8, 8, 3), nn.ELU(), Up(8, 4, 4), Block(4), nn.ELU(), Up(4, 4, 3), Block(4), nn.ELU(),
                 Up(4, 2, 2), Block(2), nn.ELU(), PadConv(2, 1, 3))


class Merger(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 2, 2)

    def forward(self, x: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
        x = x.permute(0, 2, 1).reshape(x.shape[0], x.shape[2], *size)
        torch._check(x.shape[2] > 1)
        torch._check(x.shape[3] > 1)
        return self.conv(x).flatten(2)


class FrameMerger(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 2, 2)

    def forward(self, x: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
        torch._check(size[0] > 1)
        torch._check(size[1] > 1)
        x = x.reshape(-1, *size, x.shape[-1]).permute(0, 3, 1, 2)
        return self.conv(x).flatten(2)


class Tower(nn.Module):
    def __init__(self, merger: type[nn.Module] = Merger) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.merger = merger()

    def forward(self, x: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
        x = self.proj(x)
        _, h, w = grid.tolist()[0]  # t is read and never used
        return self.merger(x, size=(h, w))


def _closed(model: nn.Module, args: tuple) -> tuple[torch2ir.IR, nn.Module]:
    torch.manual_seed(0)
    model.eval()
    ir = torch2ir.convert(model, args)
    rebuilt = ir2torch.convert(ir, model.state_dict())
    assert torch.equal(rebuilt(*args), model(*args))
    assert torch2ir.convert(rebuilt, args) == ir
    return ir, rebuilt


def _assertions(ir: torch2ir.IR) -> list[tuple[dict, str]]:
    out = []
    for impl in ir.values():
        for name in impl.nodes if impl.type == "module" else []:
            node = impl.node(name)
            if node.get("implementation") == "aten._assert_scalar.default":
                cond = impl.node(node["args"][0].node)
                out.append((cond.get("meta") or {}, node["args"][1]))
    return out


def test_seanet_convolutions_read_their_input_length_and_state_equations_as_computed() -> None:
    ir, _ = _closed(encoder(), (torch.randn(1, 1, 50),))
    inner = ir["layers.1.block.1"]  # called with data-flow arguments: the two sizes its caller read from data
    sizes = [n for n in inner.nodes if inner.node(n).get("implementation") == "aten.sym_size.int"]
    assert sizes, "the convolution reads its input's length itself"
    assert [inner.node(n)["type"] for n in inner.nodes].count("input") == 3  # the tensor and the two sizes
    equations = [(meta["sym"], text) for meta, text in _assertions(ir) if meta.get("sym", "").startswith("Eq(")]
    assert equations
    for sym, text in equations:
        assert f"expression {sym} on node" in text


def test_upsampling_layers_read_the_products_in_graph_order() -> None:
    _closed(decoder(), (torch.randn(1, 8, 4),))


def test_an_unused_grid_entry_leaves_no_gap_and_a_checked_size_is_known_before_the_convolution() -> None:
    model, args = Tower(), (torch.randn(1, 16, 4), torch.tensor([[1, 4, 4]]))
    ir, rebuilt = _closed(model, args)
    texts = [text for _, text in _assertions(ir)]
    numbers = {int(n) for impl in ir.values() for name in impl.nodes for n in
               re.findall(r"\bu(\d+)\b", str(impl.node(name).get("meta")))}
    assert numbers == set(range(len(numbers)))  # u0, u1, u2: t's symbol is not skipped
    assert any(re.search(r"expression 1 < u\d+ on", text) for text in texts)  # the merger's own check
    assert not any("&" in text for text in texts)  # not the convolution's, which it implies
    bad = (args[0], torch.tensor([[1, 1, 16]]))  # h = 1: the merger's check fails, in the rebuild as in the model
    with pytest.raises(RuntimeError):
        model(*bad)
    with pytest.raises(RuntimeError):
        rebuilt(*bad)


def test_a_python_modulo_of_sizes_is_the_modulo_export_learned() -> None:
    ir, _ = _closed(Tower(FrameMerger), (torch.randn(1, 16, 4), torch.tensor([[1, 4, 4]])))
    texts = [text for _, text in _assertions(ir)]
    assert any("Eq(Mod(64, " in text for text in texts)
    assert not any("PythonMod" in text for text in texts)

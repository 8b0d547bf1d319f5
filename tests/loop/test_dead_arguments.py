"""Arguments and results no op uses keep their place in the signature (#14 point 2).

Export drops computations whose results nothing uses when they sit in a ``no_grad`` region (ALiBi Falcon's rotary
embeddings, passed to every layer and ignored there). The rebuilt modules still take and return those tensors:
where a call returns one, the parent passes that result on; where nothing computes it, the parent passes a
NaN-filled stand-in of the same shape and dtype, so a swapped-in module that does read it gives NaN, never
plausible numbers.
"""

from __future__ import annotations

import copy
import inspect

import torch
from torch import nn

import ir2torch
import torch2ir


class Rotary(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("freq", torch.arange(1.0, 5.0))

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        angles = x[..., :4] * self.freq
        return angles.cos(), angles.sin()


class Layer(nn.Module):
    """Ignores ``position`` unless ``rotate`` (as ALiBi Falcon's attention ignores its rotary embeddings)."""

    def __init__(self, rotate: bool = False) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.rotate = rotate

    def forward(self, hidden: torch.Tensor, position: tuple[torch.Tensor, torch.Tensor] | None = None,
                scale: float = 1.0) -> torch.Tensor:
        out = self.proj(hidden) * scale
        if self.rotate:
            out = out + position[0].sum(-1, keepdim=True)
        return out


class FromCall(nn.Module):
    """The unused tensors come from a child's call."""

    def __init__(self) -> None:
        super().__init__()
        self.rotary = Rotary()
        self.layers = nn.ModuleList([Layer(), Layer()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        position = self.rotary(x)
        for layer in self.layers:
            x = layer(x, position, scale=0.5)
        return x


class FromParent(nn.Module):
    """The unused tensors are computed by the parent itself, under ``no_grad``."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = Layer()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            position = (x[..., :4].cos(), x[..., :4].sin())
        return self.layer(x, position)


def _rebuilt(model: nn.Module, x: torch.Tensor):
    ir = torch2ir.convert(model, (x,))
    return ir, ir2torch.convert(ir, model.state_dict())


def _swap(model: nn.Module, path: str, new: nn.Module) -> None:
    parent, _, name = path.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, name, new)


def test_results_nothing_uses_are_passed_on_and_every_module_is_signed() -> None:
    torch.manual_seed(0)
    model, x = FromCall().eval(), torch.randn(2, 3, 8)
    ir, rebuilt = _rebuilt(model, x)
    assert torch.equal(rebuilt(x), model(x))
    for path in ("rotary", "layers.0", "layers.1"):
        assert "in_spec" in ir[path].meta, path
        assert list(inspect.signature(rebuilt.get_submodule(path).forward).parameters) == \
            list(inspect.signature(model.get_submodule(path).forward).parameters), path
    # the rebuilt rotary returns two tensors of the original's shapes (NaN: export kept none of their ops)
    cos, sin = rebuilt.rotary(x)
    assert cos.shape == sin.shape == (2, 3, 4) and cos.isnan().all()
    # the root passes the rotary's results on: no stand-in of its own
    assert not [n for n, a in ir["root"].graph.nodes(data=True) if a.get("implementation") == "aten.full.default"]
    for path in ("rotary", "layers.0", "layers.1"):
        swapped = ir2torch.convert(ir, model.state_dict())
        _swap(swapped, path, copy.deepcopy(model.get_submodule(path)))
        assert torch.equal(swapped(x), model(x)), path


def test_a_module_swapped_in_that_reads_the_stand_in_gives_nan() -> None:
    torch.manual_seed(0)
    model, x = FromParent().eval(), torch.randn(2, 3, 8)
    ir, rebuilt = _rebuilt(model, x)
    assert torch.equal(rebuilt(x), model(x))
    stand_ins = [a for _, a in ir["root"].graph.nodes(data=True) if a.get("implementation") == "aten.full.default"]
    assert len(stand_ins) == 2  # cos and sin, each with its shape
    assert all(a["meta"]["shape"] == [2, 3, 4] for a in stand_ins)
    reader = copy.deepcopy(model.layer)
    reader.rotate = True
    swapped = ir2torch.convert(ir, model.state_dict())
    _swap(swapped, "layer", reader)
    assert swapped(x).isnan().all()
    # the original module, which ignores the argument, gives the original outputs
    _swap(swapped, "layer", copy.deepcopy(model.layer))
    assert torch.equal(swapped(x), model(x))


def test_dead_arguments_reach_a_fixpoint() -> None:
    torch.manual_seed(0)
    for model in (FromCall().eval(), FromParent().eval()):
        x = torch.randn(2, 3, 8)
        ir, rebuilt = _rebuilt(model, x)
        again = torch2ir.convert(rebuilt, (x,))
        assert again == ir, type(model).__name__
        assert torch2ir.convert(ir2torch.convert(again, model.state_dict()), (x,)) == ir

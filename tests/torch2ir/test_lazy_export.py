"""The conversion's exports make lazily compiled graph modules: export's passes stop generating source nobody
reads, the graphs are the same, and the code appears (and runs) the moment something reads or calls it."""

from __future__ import annotations

import pytest
import torch
from torch import fx, nn

import torch2ir
from torch2ir.frontend import export, lazy_graph_modules


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.norm = nn.LayerNorm(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.norm(self.lin(x))) * 2


@pytest.fixture
def generated(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the graphs whose Python source is generated (``fx.Graph.python_code``)."""
    calls = [0]
    original = fx.Graph.python_code

    def counting(self: fx.Graph, *args: object, **kwargs: object) -> object:
        calls[0] += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(fx.Graph, "python_code", counting)
    return calls


def test_lazy_export_generates_less_source_and_the_same_program(generated: list[int]) -> None:
    torch.manual_seed(0)
    model, x = _Block().eval(), torch.randn(2, 4)
    plain = torch.export.export(model, (x,))
    eager_count, generated[0] = generated[0], 0
    ep = export(model, (x,), None, strict=False, dynamic_shapes=None, preserve=[])
    assert generated[0] < eager_count  # export's passes no longer regenerate the source after each one
    assert [(n.op, str(n.target)) for n in ep.graph.nodes] == [(n.op, str(n.target)) for n in plain.graph.nodes]
    assert "relu" in ep.graph_module.code
    torch.testing.assert_close(ep.module()(x), model(x), rtol=0, atol=0)


def test_lazy_graph_modules_is_scoped(generated: list[int]) -> None:
    torch.manual_seed(0)
    model, x = _Block().eval(), torch.randn(2, 4)
    torch.export.export(model, (x,))
    eager_count, generated[0] = generated[0], 0
    with lazy_graph_modules():
        pass
    torch2ir.convert(model, (x,))
    generated[0] = 0
    torch.export.export(model, (x,))
    assert generated[0] == eager_count  # the flag did not leak out of the conversion

"""The conversion's exports skip what it never reads: export's passes stop regenerating Python source (graph
modules compile lazily) and no node carries a stack trace. The graphs, the rest of their metadata and what the
program computes are those of a plain export, and the source appears (and runs) the moment something reads it."""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch import fx, nn

import torch2ir
from common.errors import ConversionError
from torch2ir.frontend.export import export, lean_export


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


def _nodes(ep: torch.export.ExportedProgram) -> list[tuple]:
    return [(n.op, str(n.target), n.name, str(n.meta.get("nn_module_stack")),
             tuple(n.meta["val"].shape) if isinstance(n.meta.get("val"), torch.Tensor) else None)
            for n in ep.graph.nodes]


def test_lean_export_generates_less_and_exports_the_same_program(generated: list[int]) -> None:
    torch.manual_seed(0)
    model, x = _Block().eval(), torch.randn(2, 4)
    plain = torch.export.export(model, (x,))
    eager_count, generated[0] = generated[0], 0
    ep = export(model, (x,), None, strict=False, dynamic_shapes=None, preserve=[])
    assert generated[0] < eager_count  # export's passes no longer regenerate the source after each one
    assert any(n.meta.get("stack_trace") for n in plain.graph.nodes)
    assert not any(n.meta.get("stack_trace") for n in ep.graph.nodes)
    assert _nodes(ep) == _nodes(plain)
    assert "relu" in ep.graph_module.code
    torch.testing.assert_close(ep.module()(x), model(x), rtol=0, atol=0)


def test_lean_export_is_scoped(generated: list[int]) -> None:
    torch.manual_seed(0)
    model, x = _Block().eval(), torch.randn(2, 4)
    torch.export.export(model, (x,))
    eager_count, generated[0] = generated[0], 0
    with lean_export():
        assert fx.config.do_not_emit_stack_traces
    assert not fx.config.do_not_emit_stack_traces
    torch2ir.convert(model, (x,))
    generated[0] = 0
    plain = torch.export.export(model, (x,))
    assert generated[0] == eager_count  # neither setting leaked out of the conversion
    assert any(n.meta.get("stack_trace") for n in plain.graph.nodes)


def test_lean_export_restores_settings_when_export_fails() -> None:
    class Fails(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("boom")

    with pytest.raises(ConversionError):
        torch2ir.convert(Fails(), (torch.randn(2),))
    assert not fx.config.do_not_emit_stack_traces


def test_decomposed_lowering_is_the_same_with_a_lean_decomposition(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    model, x = _Block().eval(), torch.randn(2, 4)
    ir = torch2ir.convert(model, (x,))
    lean = ir.lower(decompose=True)
    monkeypatch.setattr("torch2ir.lowering.capture.lean_export", contextlib.nullcontext)
    plain = ir.lower(decompose=True)
    assert lean == plain and lean.to_dict() == plain.to_dict()
    assert len(lean.nodes) > 3
    assert "aten.native_layer_norm.default" in {str(n.op_type) for n in lean.nodes}  # decomposed: no aten.linear
    assert not any("linear" in str(n.op_type) for n in lean.nodes)

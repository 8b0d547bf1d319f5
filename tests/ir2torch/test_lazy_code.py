"""A very large graph gets its generated code at first use (``ir2torch.codegen.lazy``), and behaves exactly as one
compiled while rebuilding: outputs, signature, ``code``, the loop, export, copies, errors.

The threshold is lowered here so that the graphs of real models (a transformers BERT, a hand model with keyword-only
parameters) are deferred; each test compares with the same IR rebuilt with every graph compiled at once.
"""

from __future__ import annotations

import copy
import inspect

import pytest
import torch
from torch import nn

import ir2torch
import ir2torch.codegen.lazy as lazy_code
import torch2ir
from common.errors import IRFormatError
from tests.helpers import same_outputs
from tests.real.corpus import CORPUS


def _graph_modules(model: nn.Module) -> list[torch.fx.GraphModule]:
    return [m for m in model.modules() if isinstance(m, torch.fx.GraphModule)]


def _both(ir, state, monkeypatch, nodes: int = 5):
    """``ir`` rebuilt with graphs of ``nodes`` or more deferred, and with every graph compiled at once."""
    monkeypatch.setattr(lazy_code, "LAZY_NODES", nodes)
    lazy = ir2torch.convert(ir, state)
    monkeypatch.setattr(lazy_code, "LAZY_NODES", 10**9)
    eager = ir2torch.convert(ir, state)
    return lazy, eager


class Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Sequential(*[nn.Linear(6, 6) for _ in range(3)])

    def forward(self, x: torch.Tensor, /, bias: torch.Tensor, *, scale: float = 2.0) -> dict[str, torch.Tensor]:
        y = self.inner(x) * scale + bias
        for _ in range(4):
            y = torch.tanh(y) + x
        return {"y": y, "sum": y.sum(-1)}


@pytest.fixture
def bert():
    arch = next(a for a in CORPUS if a.name == "bert")
    model = arch.build().eval()
    args, kwargs = arch.inputs()
    return model, torch2ir.convert(model, args, kwargs), args, kwargs


def test_deferred_graphs_run_exactly_and_get_their_code_at_first_call(bert, monkeypatch) -> None:
    model, ir, args, kwargs = bert
    lazy, eager = _both(ir, model.state_dict(), monkeypatch)
    deferred = [m for m in _graph_modules(lazy) if lazy_code.pending(m)]
    assert len(deferred) >= 3  # root, encoder, attention blocks...
    assert not any(lazy_code.pending(m) for m in _graph_modules(eager))
    for mod, other in zip(_graph_modules(lazy), _graph_modules(eager), strict=True):
        assert inspect.signature(mod.forward) == inspect.signature(other.forward)
    with torch.no_grad():
        out = lazy(*args, **kwargs)
        assert same_outputs(out, eager(*args, **kwargs))
        assert same_outputs(out, model(*args, **kwargs))
    # every module that ran has its code now, the same source as compiled at once
    assert not any(lazy_code.pending(m) for m in _graph_modules(lazy))
    folds = [m for m in _graph_modules(lazy) if "_ir_fold" in m.__dict__]
    assert folds and all(m.__dict__["_ir_fold"].plain is type(m).forward for m in folds)  # folds still run
    for mod, other in zip(_graph_modules(lazy), _graph_modules(eager), strict=True):
        assert mod.code == other.code
        assert "def forward" in mod.code


def test_reading_code_generates_it_for_that_module_only(bert, monkeypatch) -> None:
    model, ir, _, _ = bert
    lazy, eager = _both(ir, model.state_dict(), monkeypatch)
    first, second = lazy.encoder.layer[0], lazy.encoder.layer[1]
    # identical deferred graphs are not shared: each gets its own code when it needs it
    assert lazy_code.pending(first) and lazy_code.pending(second)
    assert first.code == eager.encoder.layer[0].code
    assert not lazy_code.pending(first) and lazy_code.pending(second)
    assert lazy_code.pending(lazy)
    assert lazy.code == eager.code
    assert not lazy_code.pending(lazy)
    assert lazy.print_readable(print_output=False) == eager.print_readable(print_output=False)


class Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scaled = Scaled()

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        out = self.scaled(x, bias, scale=3.0)
        return out["y"] + out["sum"][:, None]


def test_keyword_only_and_positional_only_parameters_and_output_structure(monkeypatch) -> None:
    torch.manual_seed(0)
    model = Outer().eval()
    x, bias = torch.randn(2, 6), torch.randn(6)
    ir = torch2ir.convert(model, (x, bias))
    lazy, eager = _both(ir, model.state_dict(), monkeypatch, nodes=3)
    assert lazy_code.pending(lazy.scaled)
    signature = inspect.signature(lazy.scaled.forward)
    assert signature == inspect.signature(eager.scaled.forward)
    original = inspect.signature(model.scaled.forward)  # the same parameters, without the annotations
    bare = [p.replace(annotation=p.empty) for p in original.parameters.values()]
    assert signature == original.replace(parameters=bare, return_annotation=original.empty)
    assert [p.kind for p in signature.parameters.values()] == [inspect.Parameter.POSITIONAL_ONLY,
                                                              inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                              inspect.Parameter.KEYWORD_ONLY]
    with torch.no_grad():
        assert same_outputs(lazy.scaled(x, bias, scale=3.0), model.scaled(x, bias, scale=3.0))
        assert same_outputs(lazy(x, bias), model(x, bias))


def test_the_loop_export_and_copies_of_a_deferred_model(bert, monkeypatch) -> None:
    model, ir, args, kwargs = bert
    lazy, _ = _both(ir, model.state_dict(), monkeypatch)
    assert lazy_code.pending(lazy)
    # torch2ir reads the signature, then traces through the first call
    assert torch2ir.convert(lazy, args, kwargs) == ir
    lazy, _ = _both(ir, model.state_dict(), monkeypatch)
    exported = torch.export.export(lazy, args, kwargs)
    with torch.no_grad():
        assert same_outputs(exported.module()(*args, **kwargs), model(*args, **kwargs))
    lazy, _ = _both(ir, model.state_dict(), monkeypatch)
    copied = copy.deepcopy(lazy)
    with torch.no_grad():
        expected = model(*args, **kwargs)
        assert same_outputs(copied(*args, **kwargs), expected)
        assert same_outputs(lazy(*args, **kwargs), expected)


def test_a_failure_to_generate_the_code_is_an_ir_error_at_first_use(bert, monkeypatch) -> None:
    model, ir, args, kwargs = bert
    lazy, _ = _both(ir, model.state_dict(), monkeypatch)

    def broken(*a, **k):
        raise SyntaxError("too many statically nested blocks")

    monkeypatch.setattr(lazy_code, "_forward_from_src", broken)
    with pytest.raises(IRFormatError, match="implementation 'root'.*too many statically nested blocks"):
        lazy(*args, **kwargs)
    with pytest.raises(IRFormatError, match="implementation 'root'"):
        _ = lazy.code
    assert lazy_code.pending(lazy)  # nothing half-installed: it tries again
    monkeypatch.undo()
    with torch.no_grad():
        assert same_outputs(lazy(*args, **kwargs), model(*args, **kwargs))


def test_small_graphs_are_compiled_while_rebuilding(bert) -> None:
    model, ir, _, _ = bert
    assert lazy_code.LAZY_NODES >= 1000
    rebuilt = ir2torch.convert(ir, model.state_dict())
    assert not any(lazy_code.pending(m) for m in _graph_modules(rebuilt))


def test_torch_compile_of_a_deferred_model(monkeypatch) -> None:
    """The default ``torch.compile`` runs the first compilation eagerly (a graph break) and matches; with
    ``fullgraph=True`` dynamo cannot trace it (the documented limitation), and after one call it compiles as one
    graph."""
    torch.manual_seed(0)
    model = Outer().eval()
    x, bias = torch.randn(2, 6), torch.randn(6)
    ir = torch2ir.convert(model, (x, bias))
    lazy, _ = _both(ir, model.state_dict(), monkeypatch, nodes=3)
    torch._dynamo.reset()
    with torch.no_grad():
        assert same_outputs(torch.compile(lazy, backend="aot_eager")(x, bias), model(x, bias))
    lazy, _ = _both(ir, model.state_dict(), monkeypatch, nodes=3)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="python_code"):
        torch.compile(lazy, backend="aot_eager", fullgraph=True)(x, bias)
    with torch.no_grad():
        lazy(x, bias)  # the first call makes the code
    torch._dynamo.reset()
    with torch.no_grad():
        assert same_outputs(torch.compile(lazy, backend="aot_eager", fullgraph=True)(x, bias), model(x, bias))

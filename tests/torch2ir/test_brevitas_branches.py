"""brevitas' branches on its quantizers' state, decided while converting as the eager call decided them and asserted
in the graph (:mod:`torch2ir.frontend.brevitas_branches`): a layer with an input quantizer (``quant_layer``'s
zero-point test) and a residual add of two ``IntQuantTensor``\\ s (``check_scaling_factors_same``) trace as graphs
equal to eager; a condition computed from the model's input is not decided (the export fails as before, and
``opaque="auto"`` keeps the module opaque); a rebuild whose state flips a decided condition raises naming it."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import ir2torch
import torch2ir
from common.errors import ConversionError
from common.opaque import named_classes

qnn = pytest.importorskip("brevitas.nn")
scaled_int = pytest.importorskip("brevitas.quant.scaled_int")
IntQuantTensor = pytest.importorskip("brevitas.quant_tensor").IntQuantTensor

X = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(0))


class Layers(nn.Module):
    """A convolution with an input quantizer (its zero point ``ZeroZeroPoint``'s constant), a QuantReLU returning a
    ``QuantTensor``, a residual add of two quantized identities sharing their scale, and a quantized linear."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = qnn.QuantConv2d(3, 4, 3, padding=1, bias=True, input_quant=scaled_int.Int8ActPerTensorFloat,
                                    weight_bit_width=4)
        self.left = qnn.QuantIdentity(return_quant_tensor=True)
        self.right = qnn.QuantIdentity(return_quant_tensor=True)
        self.lin = qnn.QuantLinear(4, 5, bias=False, input_quant=scaled_int.Int8ActPerTensorFloat)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        y = self.left(y) + self.left(y.flip(3))  # IntQuantTensor + IntQuantTensor: the scales are checked
        return self.lin(y.value.mean((2, 3)))


def _layers() -> Layers:
    torch.manual_seed(0)
    model = Layers()
    model.train()
    with torch.no_grad():
        model(X)  # the activation scales' first statistics
    return model.eval()


def _quiet_convert(model: nn.Module, args: tuple, **options) -> torch2ir.IR:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch2ir.convert(model, args, **options)


def _asserts(rebuilt: nn.Module) -> list[str]:
    return [str(n.args[1]) for m in rebuilt.modules() if isinstance(getattr(m, "graph", None), torch.fx.Graph)
            for n in m.graph.nodes if "_assert_async" in str(n.target)]


def test_brevitas_layers_trace_as_graphs_equal_to_eager() -> None:
    model = _layers()
    ir = _quiet_convert(model, (X,))
    assert not getattr(ir.capture, "opaque", None)
    rebuilt = ir2torch.convert(ir, model.state_dict())
    with torch.no_grad():
        assert torch.equal(rebuilt(X), model(X))
        other = X * 3 - 1
        assert torch.equal(rebuilt(other), model(other))  # the branches do not depend on the input
    messages = _asserts(rebuilt)
    assert any("quant_layer in conv" in m for m in messages) and any("quant_layer in lin" in m for m in messages)
    assert any("check_scaling_factors_same in the root" in m for m in messages)
    assert torch.equal(model.conv.weight, model.conv.weight)  # the model itself is untouched


class Chain(nn.Module):
    """A convolution with an input quantizer collecting statistics in train mode, then one with weights only."""

    def __init__(self) -> None:
        super().__init__()
        self.first = qnn.QuantConv2d(3, 4, 3, padding=1, input_quant=scaled_int.Int8ActPerTensorFloat)
        self.second = qnn.QuantConv2d(4, 2, 3, padding=1, weight_bit_width=4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.relu(self.first(x)))


def _chain() -> Chain:
    torch.manual_seed(0)
    model = Chain()
    model.train()
    with torch.no_grad():
        model(X)
    return model.eval()


def test_with_opaque_auto_train_mode_stays_exact() -> None:
    # the layer whose quantizer collects statistics in train mode stays opaque (made again by its constructor): its
    # forward traces, but the train-mode pass finds (or, where it cannot run, assumes) that it computes otherwise
    model = _chain()
    ir = _quiet_convert(model, (X,), opaque="auto")
    opaque = {p: why for p, _, why in ir.capture.opaque}
    assert "first" in opaque and all("train mode" in why for why in opaque.values())
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=named_classes(ir.values()))
    with torch.no_grad():
        assert torch.equal(rebuilt(X), model(X))
    twin = _chain()
    twin.train()
    rebuilt.train()
    for step in range(2):
        batch = X * (1 - 0.3 * step)
        out, got = twin(batch), rebuilt(batch)
        assert torch.equal(out, got)
        out.square().mean().backward()
        got.square().mean().backward()
        assert all(torch.equal(p.grad, q.grad) for p, q in zip(twin.parameters(), rebuilt.parameters(), strict=True)
                   if p.grad is not None)


class ZeroPointIn(nn.Module):
    """``quant_layer`` on hand-made ``IntQuantTensor``\\ s: the input's zero point is a buffer (``from_input``
    False) or computed from the input; a QuantIdentity quantizes the output (a brevitas module: the conversion then
    looks at brevitas' branches)."""

    def __init__(self, from_input: bool) -> None:
        super().__init__()
        self.from_input = from_input
        self.weight = nn.Parameter(torch.randn(4, 3, 3, 3, generator=torch.Generator().manual_seed(1)))
        self.register_buffer("zero_point", torch.zeros(()))
        self.out = qnn.QuantIdentity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        zero_point = (x.amax() > 100).to(x.dtype) if self.from_input else self.zero_point
        one, eight = torch.tensor(1.0), torch.tensor(8.0)
        quant_input = IntQuantTensor(x, one, zero_point, eight, True, False)
        quant_weight = IntQuantTensor(self.weight, one, torch.tensor(0.0), eight, True, False)
        out = F.conv2d(quant_input, quant_weight)
        return self.out(out.value if isinstance(out, IntQuantTensor) else out - 1.0)


def test_a_flipped_condition_raises_in_the_rebuild() -> None:
    model = ZeroPointIn(from_input=False).eval()
    ir = _quiet_convert(model, (X,))
    rebuilt = ir2torch.convert(ir, model.state_dict())
    assert torch.equal(rebuilt(X), model(X))
    state = {**model.state_dict(), "zero_point": torch.tensor(2.0)}  # eager would now take the other branch
    flipped = ir2torch.convert(ir, state)
    model.zero_point.fill_(2.0)
    assert not torch.equal(model(X), rebuilt(X))  # the other branch's values really differ
    with pytest.raises(RuntimeError, match="quant_layer in the root: bool of a tensor was False"):
        flipped(X)


def test_a_condition_computed_from_the_input_is_not_decided() -> None:
    model = ZeroPointIn(from_input=True).eval()
    with pytest.raises(ConversionError, match="data-dependent|DataDependent"):
        _quiet_convert(model, (X,))
    ir = _quiet_convert(nn.Sequential(model), (X,), opaque="auto")
    assert "0" in [p for p, _, _ in ir.capture.opaque]


def test_outside_a_conversion_brevitas_runs_its_own_code() -> None:
    from torch2ir.frontend import brevitas_branches

    before = (torch.Tensor.__dict__.get("__bool__"), torch.allclose)
    model = _layers()
    _quiet_convert(model, (X,))
    assert (torch.Tensor.__dict__.get("__bool__"), torch.allclose) == before
    with brevitas_branches.decided(model, (X,), None) as run:
        assert run is not None and run.noted and not run.replay
        with torch.no_grad():
            assert torch.equal(model(X), model(X))  # eager calls meanwhile take their own branches


def test_a_model_that_cannot_be_copied_converts_without_decisions() -> None:
    import threading

    model = nn.Sequential(qnn.QuantConv2d(3, 4, 3, weight_bit_width=4)).eval()
    model.lock = threading.Lock()  # deepcopy refuses it: nothing is decided, the export runs as before
    ir = _quiet_convert(model, (X,))
    with torch.no_grad():
        assert torch.equal(ir2torch.convert(ir, model.state_dict())(X), model(X))

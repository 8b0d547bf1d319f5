"""PT2E quantization with torchao (#15 point 3): ``prepare_pt2e`` + ``convert_pt2e`` and ``prepare_qat_pt2e``
models convert and rebuild exactly with ``quantized_decomposed::*`` allowed, without ``.train()`` / ``.eval()``
being called on the exported ``GraphModule`` (which refuses them).

Quantizing is deterministic (seeded) and slow (``convert_pt2e`` of a QAT model exports about a hundred
pattern graphs), so each quantized model is made once per process and every test gets its own deep copy;
``make test`` runs this file's tests in one worker (see tests/scheduling.py).
"""

from __future__ import annotations

import copy
import types
from functools import cache
from typing import Any

import pytest
import torch
from torch import nn
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e, prepare_qat_pt2e
from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
    X86InductorQuantizer,
    get_default_x86_inductor_quantization_config,
)

import ir2torch
import torch2ir
from common.errors import ConversionError
from common.quant import PT2E_OBSERVERS
from common.testing import assert_roundtrip
from torch2ir.frontend.export import ExportFailedError

ALLOW = ["quantized_decomposed::*"]


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 4, 1)
        self.lin = nn.Linear(4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(self.conv(x)))
        return self.lin(torch.relu(self.conv2(y) + y).mean((2, 3)))


X = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(0))


@cache
def _made(qat: bool, convert: bool) -> nn.Module:
    torch.manual_seed(0)
    graph = torch.export.export(ConvNet().train(qat), (X,)).module()
    quantizer = X86InductorQuantizer().set_global(get_default_x86_inductor_quantization_config(is_qat=qat))
    model = (prepare_qat_pt2e if qat else prepare_pt2e)(graph, quantizer)
    for _ in range(2):
        model(torch.randn(2, 3, 8, 8))
    return convert_pt2e(model) if convert else model


def _quantized(qat: bool, convert: bool) -> nn.Module:
    """A fresh copy of the (cached) quantized ConvNet: prepared for QAT or PTQ, calibrated, maybe converted.

    ``GraphModule.__deepcopy__`` rebuilds the module and drops what was set on the instance afterwards (export's
    refusing ``train`` / ``eval``, ``convert_pt2e``'s ``_frozen_param_count``): those are set on the copy again.
    """
    made = _made(qat, convert)
    model = copy.deepcopy(made)
    for name, value in made.__dict__.items():
        if name not in model.__dict__:
            bound = isinstance(value, types.MethodType) and value.__self__ is made
            setattr(model, name, types.MethodType(value.__func__, model) if bound else copy.deepcopy(value))
    assert model.__dict__.keys() == made.__dict__.keys() and model.code == made.code
    return model


def _converters() -> tuple[torch2ir.Torch2Ir, ir2torch.Ir2Torch]:
    to_ir, from_ir = torch2ir.get_default_converter(), ir2torch.get_default_converter()
    for pattern in ALLOW:
        to_ir.allowlist.allow(pattern)
        from_ir.allowlist.allow(pattern)
    return to_ir, from_ir


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("kind", ["ptq_converted", "qat_prepared", "qat_converted"])
def test_pt2e_model_round_trips_exactly(kind: str, training: bool) -> None:
    model = _quantized(qat=kind.startswith("qat"), convert=kind.endswith("converted"))
    with pytest.raises(NotImplementedError):
        model.eval()  # an exported GraphModule refuses mode switches: conversion must not call them
    for module in model.modules():
        module.training = training
    to_ir, from_ir = _converters()
    ir, rebuilt, report = assert_roundtrip(model, (X,), converter=to_ir, rebuilder=from_ir, atol=0, rtol=0)
    assert report.max_abs_diff == 0.0
    ops = {a["implementation"] for impl in ir.values() for _, a in impl.graph.nodes(data=True)
           if a["type"] == "function"}
    if kind.endswith("converted"):
        assert "quantized_decomposed.dequantize_per_channel.default" in ops, sorted(ops)
    else:  # torchao's fake quantizers are handled leaves, rebuilt as their class (convert_pt2e must find them)
        assert "pt2e_fusedmovingavgobsfakequantize" in {impl.type for impl in ir.values()}
        assert all(type(m).__module__ == "torchao.quantization.pt2e.fake_quantize" for p, m in rebuilt.named_modules()
                   if type(m).__name__ == "FusedMovingAvgObsFakeQuantize")
    assert all(m.training == training for m in model.modules())  # flags left as they were
    state = model.state_dict()
    assert all(torch.equal(v, rebuilt.state_dict()[k]) for k, v in state.items())


def test_pt2e_model_needs_the_opt_in() -> None:
    model = _quantized(qat=False, convert=True)
    with pytest.raises(ConversionError, match="quantized_decomposed"):
        torch2ir.convert(model, (X,))
    ir = torch2ir.convert(model, (X,), allow=ALLOW)
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=ALLOW)
    assert torch.equal(model(X), rebuilt(X))


def _xnnpack(qat: bool) -> Any:
    from torchao.testing.pt2e._xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config

    return XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_qat=qat))


@pytest.mark.parametrize("quantizer", ["x86", "xnnpack"])
def test_a_calibrating_model_round_trips_with_its_observers(quantizer: str) -> None:
    """PTQ-prepared (observers calibrating): torchao's observers branch on the values they see (``HistogramObserver``
    for X86, ``MinMaxObserver``'s ``if x_min == -inf`` for XNNPACK), which torch.export cannot trace; they are
    handled leaves traced as stand-ins and rebuilt as the real torchao classes with their statistics, so the
    rebuilt model calibrates exactly as the original: same outputs and same statistics over further calls."""
    torch.manual_seed(0)
    graph = torch.export.export(ConvNet().eval(), (X,)).module()
    chosen = X86InductorQuantizer().set_global(get_default_x86_inductor_quantization_config()) \
        if quantizer == "x86" else _xnnpack(False)
    model = prepare_pt2e(graph, chosen)
    model(torch.randn(2, 3, 8, 8))
    observers = {p: type(m) for p, m in model.named_modules() if type(m).__module__.startswith("torchao")}
    assert observers
    to_ir, from_ir = _converters()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    ir = to_ir.convert(model, (X,))
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in state.items())  # converting calibrates nothing
    kinds = {ir[p].type for p in observers}
    assert kinds <= set(PT2E_OBSERVERS.values())
    assert ("pt2e_histogramobserver" if quantizer == "x86" else "pt2e_minmaxobserver") in kinds
    rebuilt = from_ir.convert(ir, state)
    assert {p: type(rebuilt.get_submodule(p)) for p in observers} == observers
    for step in range(3):
        x = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(step)) * (step + 1)
        assert torch.equal(rebuilt(x), model(x))
        want, got = model.state_dict(), rebuilt.state_dict()
        assert want.keys() == got.keys() and all(torch.equal(got[k], v) for k, v in want.items())


def test_a_calibrating_model_names_the_observer_export_cannot_trace() -> None:
    """An observer torch.export cannot trace and torch2ir does not know (a team's own subclass of torchao's
    ``HistogramObserver``): the error names that observer (export's own names only ``Eq(u0, 1)``), and the failed
    attempt leaves the model as it was (statistics and eager output)."""
    from torchao.quantization.pt2e.observer import HistogramObserver

    class TeamHistogram(HistogramObserver):
        pass

    model = _quantized(qat=False, convert=False)
    for module in model.modules():
        if type(module) is HistogramObserver:
            module.__class__ = TeamHistogram
    before = {k: v.clone() for k, v in model.state_dict().items()}
    twin = _quantized(qat=False, convert=False)
    want = twin(X)  # a forward calibrates: on another copy
    to_ir, _ = _converters()
    with pytest.raises(ExportFailedError, match=r"the observer activation_post_process_0 \(tests\.quant\.test_pt2e\."
                       r"test_a_calibrating_model_names_the_observer_export_cannot_trace\.<locals>\.TeamHistogram\): "
                       r"GuardOnDataDependentSymNode") as info:
        to_ir.convert(model, (X,))
    assert "calibrate in eager mode" in info.value.hint
    after = model.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(after[k], v) for k, v in before.items())
    assert torch.equal(model(X), want)
